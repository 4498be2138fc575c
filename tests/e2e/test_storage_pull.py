"""`rtjob pull` against a real S3-protocol server on loopback (moto) and local storage, with synthetic trees:
checkpoint selection, resumable re-pulls, a pull killed mid-transfer, hostile keys, errors in one line, and
no secret in any output. No Ray cluster: these run in seconds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.jobspec.project import PULLED_RUNS_DIR
from support.cli import RTJOB, base_env, popen_rtjob, rtjob
from support.s3_server import S3Server, bucket_fixture, process_server
from support.tcp_proxy import DroppingProxy

BUCKET = "pull-tests"


s3 = bucket_fixture(BUCKET)


@pytest.fixture
def env(s3: S3Server, tmp_path: Path) -> dict[str, str]:
    return base_env(tmp_path / "home", **s3.env(), AWS_EC2_METADATA_DISABLED="true")


class Cli:
    """Runs rtjob and checks that no output of any call ever contains a secret."""

    def __init__(self, env: dict[str, str], secrets: list[str]) -> None:
        self.env, self.secrets = env, secrets

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
                 ) -> subprocess.CompletedProcess[str]:
        proc = rtjob(*args, env=env or self.env, timeout=timeout)
        for secret in self.secrets:
            assert secret not in proc.stdout and secret not in proc.stderr, f"secret printed by rtjob {args}"
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def json(self, *args: str, code: int = 0) -> dict[str, Any]:
        proc = self(*args, "--output", "json")
        assert proc.returncode == code, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def cli(env: dict[str, str], s3: S3Server) -> Cli:
    return Cli(env, [s3.secret_key, s3.access_key])


def history(epochs: int, val_losses: list[float]) -> list[dict[str, float]]:
    return [{"epoch": e, "train_loss": 2.0 / e, "val_loss": val_losses[e - 1], "val_accuracy": 0.5 + e / 20,
             "train_accuracy": 0.4 + e / 20, "train_samples_per_s": 400.0 + e, "epoch_time_s": 3.0 + e}
            for e in range(1, epochs + 1)]


VAL_LOSSES = [0.9, 0.4, 0.6]  # epoch 2 is the best by val_loss; epoch 3 by accuracy


def run_tree(prefix: str = "") -> dict[str, bytes]:
    """A run folder as Ray Train + training/checkpoint.py lay it out (3 epochs), plus folder markers."""
    files: dict[str, bytes] = {}
    for epoch in (1, 2, 3):
        ckpt = f"{prefix}checkpoint_epoch_{epoch:04d}"
        files[f"{ckpt}/model.pt"] = os.urandom(50_000 + epoch)
        files[f"{ckpt}/optimizer.pt"] = os.urandom(20_000)
        files[f"{ckpt}/state.json"] = json.dumps({"epoch": epoch}).encode()
        files[f"{ckpt}/metrics.json"] = json.dumps(history(epoch, VAL_LOSSES)).encode()
        files[f"{ckpt}/"] = b""  # a zero-byte folder marker
    files[f"{prefix}checkpoint_manager_snapshot.json"] = b'{"checkpoints": 3}'
    files[f"{prefix}.validate_storage_marker"] = b""
    return files


def upload(s3: S3Server, prefix: str, files: dict[str, bytes]) -> None:
    client = s3.client()
    for rel, data in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=data)


def put_raw(key: str, data: bytes) -> None:
    """Store a key exactly as given (HTTP clients would normalise '..' and '//' in a URL path)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    s3_backends[DEFAULT_ACCOUNT_ID]["aws"].put_object(BUCKET, key, data)


MANIFEST = ".rtjob/pull.jsonl"  # rtjob pull's own folder in DIR (its manifest; its lock while it runs): not the run's


def local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and ".rtjob" not in p.relative_to(root).parts}


def partials(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".rtjob-partial" in p.name]


# ---------------------------------------------------------------------------------------------
# selection


def test_pull_latest_best_and_all_from_s3(s3, cli, tmp_path):
    files = run_tree()
    upload(s3, "runs/ddp/r-select", files)
    uri = f"s3://{BUCKET}/runs/ddp/r-select"
    run_level = {"checkpoint_manager_snapshot.json", ".validate_storage_marker"}

    latest = cli.json("pull", uri, "--to", str(tmp_path / "latest"))
    assert latest["checkpoints"] == ["checkpoint_epoch_0003"]
    assert latest["available_checkpoints"] == [f"checkpoint_epoch_{e:04d}" for e in (1, 2, 3)]
    assert latest["markers_skipped"] == 3 and latest["refused"] == [] and latest["failed"] == []
    got = local_files(tmp_path / "latest")
    expected = {k: v for k, v in files.items() if k.startswith("checkpoint_epoch_0003/") and not k.endswith("/")}
    expected |= {k: files[k] for k in run_level}
    expected["metrics.json"] = files["checkpoint_epoch_0003/metrics.json"]  # the whole history comes along
    assert got == expected
    assert latest["files"] == len(expected) and latest["downloaded"] == len(expected)
    assert latest["bytes_total"] == sum(len(v) for v in expected.values())

    best = cli.json("pull", uri, "--to", str(tmp_path / "best"), "--checkpoint", "best")
    assert best["checkpoints"] == ["checkpoint_epoch_0002"]
    assert best["best"] == {"metric": "val_loss", "mode": "min", "value": 0.4, "checkpoint": "checkpoint_epoch_0002"}
    got = local_files(tmp_path / "best")
    assert got["checkpoint_epoch_0002/model.pt"] == files["checkpoint_epoch_0002/model.pt"]
    assert got["metrics.json"] == files["checkpoint_epoch_0003/metrics.json"]  # the full history, not epoch 2's
    assert not (tmp_path / "best" / "checkpoint_epoch_0003").exists()

    acc = cli.json("pull", uri, "--to", str(tmp_path / "acc"), "--checkpoint", "best:val_accuracy")
    assert acc["best"]["mode"] == "max" and acc["checkpoints"] == ["checkpoint_epoch_0003"]
    worst = cli.json("pull", uri, "--to", str(tmp_path / "worst"), "--checkpoint", "best:val_accuracy:min")
    assert worst["checkpoints"] == ["checkpoint_epoch_0001"]

    every = cli.json("pull", uri, "--to", str(tmp_path / "all"), "--checkpoint", "all")
    assert every["checkpoints"] == [f"checkpoint_epoch_{e:04d}" for e in (1, 2, 3)]
    got = local_files(tmp_path / "all")
    assert {k: v for k, v in got.items() if k != "metrics.json"} == {
        k: v for k, v in files.items() if not k.endswith("/")}

    # Text output: a summary on stdout, nothing on stderr.
    text = cli("pull", uri, "--to", str(tmp_path / "text"))
    assert text.returncode == 0 and text.stderr == ""
    assert "checkpoint: latest → checkpoint_epoch_0003" in text.stdout and "history:" in text.stdout

    # The default destination is ./rtjob-runs/<last segment of the URI> (never uploaded by a submit).
    proc = subprocess.run([*RTJOB, "pull", uri], env=cli.env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / PULLED_RUNS_DIR / "r-select" / "checkpoint_epoch_0003" / "model.pt").is_file()

    unknown = cli("pull", uri, "--to", str(tmp_path / "x"), "--checkpoint", "best:no_such_metric")
    assert unknown.returncode == 2 and "no checkpoint reports 'no_such_metric'" in unknown.stderr
    assert "val_loss" in unknown.stderr  # names the metrics there are


# ---------------------------------------------------------------------------------------------
# resumable


def test_repull_skips_unchanged_files_and_fetches_changed_ones(s3, cli, tmp_path):
    files = run_tree()
    upload(s3, "runs/ddp/r-resume", files)
    uri, dest = f"s3://{BUCKET}/runs/ddp/r-resume", tmp_path / "dest"
    first = cli.json("pull", uri, "--to", str(dest), "--checkpoint", "all")
    assert first["downloaded"] == first["files"] == 15 and first["skipped"] == 0

    again = cli.json("pull", uri, "--to", str(dest), "--checkpoint", "all")
    assert again["downloaded"] == 0 and again["skipped"] == 15 and again["bytes_downloaded"] == 0

    # A remote file rewritten with the same size: a new ETag, so it comes again (and only it).
    changed = os.urandom(len(files["checkpoint_epoch_0002/model.pt"]))
    s3.client().put_object(Bucket=BUCKET, Key="runs/ddp/r-resume/checkpoint_epoch_0002/model.pt", Body=changed)
    third = cli.json("pull", uri, "--to", str(dest), "--checkpoint", "all")
    assert third["downloaded"] == 1 and third["skipped"] == 14
    assert (dest / "checkpoint_epoch_0002" / "model.pt").read_bytes() == changed

    # Without rtjob's record, files are compared by content (the ETag is their MD5): equal ones stay ...
    (dest / MANIFEST).unlink()
    fourth = cli.json("pull", uri, "--to", str(dest), "--checkpoint", "all")
    assert fourth["downloaded"] == 0 and fourth["skipped"] == 15
    # ... and a local file damaged in place (same size, same mtime) is noticed once the record is gone.
    target = dest / "checkpoint_epoch_0001" / "model.pt"
    stat = target.stat()
    target.write_bytes(b"\0" * stat.st_size)
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (dest / MANIFEST).unlink()
    fifth = cli.json("pull", uri, "--to", str(dest), "--checkpoint", "all")
    assert fifth["downloaded"] == 1 and target.read_bytes() == files["checkpoint_epoch_0001/model.pt"]


@pytest.mark.parametrize("engine", ["obstore", "crt", "botocore"])
def test_a_file_rewritten_between_listing_and_download_fails_instead_of_mixing_versions(s3, env, tmp_path,
                                                                                          monkeypatch, engine):
    """Every GET carries the listed ETag (If-Match), in every engine and on every path: a small file's one GET,
    a large one's ranged GETs (obstore's and the CRT's parts; s3transfer's). A file rewritten after the listing is
    reported, not written. (The other pull tests run on the default engine, obstore; the CRT and botocore are its
    fallbacks.)"""
    from rtjob.storage import botocore_engine, layout, location
    from rtjob.storage.pull import pull

    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RTJOB_S3_ENGINE", engine)
    prefix = "runs/ddp/r-rewritten"
    big = botocore_engine.MULTIPART_THRESHOLD + 1024
    files = {"checkpoint_epoch_0001/model.pt": os.urandom(1000), "checkpoint_epoch_0001/big.bin": os.urandom(big),
             "checkpoint_epoch_0001/state.json": b'{"epoch": 1}'}
    upload(s3, prefix, files)
    client = s3.client()

    def rewrite(plan: Any) -> None:  # after the listing, before any GET
        for rel in ("checkpoint_epoch_0001/model.pt", "checkpoint_epoch_0001/big.bin"):
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=os.urandom(len(files[rel])))

    dest = tmp_path / "dest"
    report = pull(location.parse_location(f"s3://{BUCKET}/{prefix}"), dest, layout.parse_checkpoint_choice("all"),
                  on_plan=rewrite)
    failed = sorted(item["key"].rsplit("/", 1)[-1] for item in report.failed)
    assert failed == ["big.bin", "model.pt"], report.failed
    assert report.exit_code == 1 and report.downloaded == 1 and report.engine == engine
    assert all("PreconditionFailed" in item["error"] or "ETag" in item["error"] for item in report.failed), \
        report.failed
    assert local_files(dest) == {"checkpoint_epoch_0001/state.json": b'{"epoch": 1}'} and not partials(dest)


def test_multipart_etags_are_checked_without_a_record(s3, tmp_path):
    """Objects uploaded in parts have ETag md5(part md5s)-N: a local copy is still recognised."""
    from boto3.s3.transfer import TransferConfig
    from rtjob.storage.s3store import etag_matches

    data = os.urandom(13 * 1024 * 1024 + 17)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    client = s3.client()
    for part_mb in (5, 8):
        key = f"multipart/{part_mb}.bin"
        config = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=part_mb * 1024 * 1024)
        client.upload_file(str(source), BUCKET, key, Config=config)
        etag = client.head_object(Bucket=BUCKET, Key=key)["ETag"]
        assert "-" in etag
        assert etag_matches(source, len(data), etag)
        damaged = tmp_path / "damaged.bin"
        damaged.write_bytes(data[:-1] + b"x")
        assert not etag_matches(damaged, len(data), etag)
    assert etag_matches(source, len(data), '"' + hashlib.md5(data).hexdigest() + '"')


def test_a_pull_killed_mid_transfer_leaves_no_partial_file_and_reruns_to_identical_bytes(s3, env, tmp_path):
    files = {f"checkpoint_epoch_0001/shard_{i}.bin": os.urandom(30 * 1024 * 1024) for i in range(3)}
    files |= {f"checkpoint_epoch_0001/small/{i:03d}.json": os.urandom(2000 + i) for i in range(40)}
    upload(s3, "runs/ddp/r-kill", files)
    uri, dest = f"s3://{BUCKET}/runs/ddp/r-kill", tmp_path / "dest"

    proc = popen_rtjob("pull", uri, "--to", str(dest), "--concurrency", "2", env=env)
    deadline = time.monotonic() + 60
    seen_partial: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        # A shard's partial file (a small file's may be renamed before the kill lands); it may vanish as we look.
        seen_partial = [p for p in partials(dest) if "shard_" in p.name and _size(p) > 0] if dest.exists() else []
        if seen_partial:
            proc.send_signal(signal.SIGKILL)  # no chance to clean up
            break
        time.sleep(0.005)
    proc.wait(30)
    proc.stdout.close() if proc.stdout else None
    proc.stderr.close() if proc.stderr else None
    assert seen_partial and proc.returncode == -signal.SIGKILL, "the pull was not caught mid-transfer"

    # No file under its real name is partial: each is complete or absent; the rest are temporary names.
    finished = 0
    for path in dest.rglob("*"):
        if not path.is_file() or ".rtjob" in path.relative_to(dest).parts:
            continue
        rel = path.relative_to(dest).as_posix()
        if ".rtjob-partial" in path.name:
            continue
        assert path.read_bytes() == files[rel], f"{rel} is under its final name but incomplete"
        finished += 1
    assert finished < len(files)

    rerun = rtjob("pull", uri, "--to", str(dest), "--output", "json", env=env, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads(rerun.stdout)
    assert report["downloaded"] + report["skipped"] == len(files)
    assert report["skipped"] == finished and report["partials_removed"] >= 1
    assert local_files(dest) == files
    assert partials(dest) == []


# ---------------------------------------------------------------------------------------------
# hostile keys


HOSTILE = {
    "../escaped-1": "'..' segment",
    "../../escaped-2": "'..' segment",
    "checkpoint_epoch_0009/../../escaped-3": "'..' segment",
    "/etc/escaped-4": "absolute path",
    "a//escaped-5": "empty path segment",
    "./escaped-6": "'.' segment",
    "b/./escaped-7": "'.' segment",
    "..\\..\\escaped-8": "backslash in the name",
    "term\x1b[31mred": "control character in the name",
    "c/escaped-9.rtjob-partial": "reserved name (rtjob's own bookkeeping)",
    ".rtjob-pull.jsonl": "reserved name (rtjob's own bookkeeping)",
    "..": "'..' segment",
}


def test_hostile_keys_are_refused_and_never_written_outside_the_destination(s3, cli, tmp_path):
    prefix = "runs/ddp/r-hostile"
    files = run_tree()
    upload(s3, prefix, files)
    for rel in HOSTILE:
        put_raw(f"{prefix}/{rel}", b"owned")
    put_raw(f"{prefix}/clash", b"a file")  # ... and also a folder:
    put_raw(f"{prefix}/clash/inner", b"a file in it")
    put_raw(f"{prefix}/linked/file", b"through a link")
    sandbox = tmp_path / "sandbox"
    dest = sandbox / "dest"
    outside = sandbox / "outside"
    outside.mkdir(parents=True)
    dest.mkdir()
    (dest / "linked").symlink_to(outside, target_is_directory=True)  # planted before the pull

    proc = cli("pull", f"s3://{BUCKET}/{prefix}", "--to", str(dest), "--output", "json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    refused = {item["key"]: item["reason"] for item in report["refused"]}
    for rel, reason in HOSTILE.items():
        shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in rel)
        assert refused.pop(f"{prefix}/{shown}") == reason
    assert refused.pop(f"{prefix}/clash") == "both a file and a folder"  # the folder wins: clash/inner is pulled
    assert refused.pop(f"{prefix}/linked/file") == "would land outside the destination"
    assert refused == {}
    assert "\x1b" not in proc.stdout + proc.stderr  # a key cannot drive the terminal
    assert "refused" in proc.stderr and "nothing was written outside" in proc.stderr

    # The good part of the run was pulled; nothing at all was written outside DIR.
    assert (dest / "checkpoint_epoch_0003" / "model.pt").read_bytes() == files["checkpoint_epoch_0003/model.pt"]
    assert (dest / "clash" / "inner").read_bytes() == b"a file in it"
    assert list(outside.iterdir()) == []
    written = {p.relative_to(sandbox).as_posix() for p in sandbox.rglob("*") if p.is_file()}
    assert all(w.startswith("dest/") for w in written), written
    assert not any("escaped" in w or "owned" in w for w in written)
    assert not list(Path("/etc").glob("escaped-*"))
    assert all(b"owned" not in (sandbox / w).read_bytes() for w in written)


# Keys that read differently from what they are (C1 controls, bidi overrides and isolates, LRM/RLM, zero-width
# and BOM, line separators), rtjob's own names in another case, and names equal but for case or normalisation.
HIDDEN = {
    "checkpoint_epoch_0003/\u202egnp.pt": "U+202E", "x\u202ay": "U+202A", "x\u2066y": "U+2066",
    "x\u2069y": "U+2069", "x\u200ey": "U+200E", "x\u200fy": "U+200F", "x\u200by": "U+200B", "\ufeffx": "U+FEFF",
    "x\u2028y": "U+2028", "x\u0085y": "control character", "x\u009by": "control character",
    ".RTJOB-PULL.JSONL": "reserved name", "m.Rtjob-Partial": "reserved name", ".rtjob-pull.lock": "reserved name",
}
CASE_TWINS = ["Case/x.bin", "case/x.bin", "checkpoint_epoch_0003/MODEL.PT", "caf\u00e9.txt", "cafe\u0301.txt"]


def test_hidden_characters_and_names_that_differ_only_in_case_are_refused(s3, cli, tmp_path):
    prefix = "runs/ddp/r-hidden"
    files = run_tree()
    upload(s3, prefix, files)
    for rel in [*HIDDEN, *CASE_TWINS]:
        put_raw(f"{prefix}/{rel}", b"owned")
    put_raw(f"{prefix}/\u202e{s3.secret_key}", b"owned")  # a refused key is printed: never with a secret in it
    dest = tmp_path / "dest"

    for output in ("json", "text"):
        proc = cli("pull", f"s3://{BUCKET}/{prefix}", "--to", str(dest), "--output", output)
        assert proc.returncode == 1, proc.stderr
    report = json.loads(cli("pull", f"s3://{BUCKET}/{prefix}", "--to", str(dest), "--output", "json").stdout)
    refused = {item["key"].removeprefix(f"{prefix}/"): item["reason"] for item in report["refused"]}
    for rel, words in HIDDEN.items():
        shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in rel)
        assert words in refused.pop(shown), (rel, report["refused"])
    for rel in [*CASE_TWINS, "checkpoint_epoch_0003/model.pt"]:  # the twin that is part of the run goes too
        shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in rel)
        assert "case-insensitive filesystem" in refused.pop(shown)
    assert refused.pop("\\u202e****") == "invisible or bidirectional formatting character (U+202E) in the name"
    assert refused == {}
    # The rest of the run came; no refused key became a file.
    got = local_files(dest)
    assert "checkpoint_epoch_0003/model.pt" not in got
    assert got["checkpoint_epoch_0003/state.json"] == files["checkpoint_epoch_0003/state.json"]
    wanted = {k for k in files if k.startswith("checkpoint_epoch_0003/") and not k.endswith(("/", "model.pt"))}
    assert set(got) == wanted | {"checkpoint_manager_snapshot.json", ".validate_storage_marker", "metrics.json"}
    assert not any(b"owned" in data for data in got.values())


@pytest.mark.parametrize("rel,reason", [
    ("a\u202eb", "invisible or bidirectional formatting character (U+202E) in the name"),
    ("a/\u2067b", "invisible or bidirectional formatting character (U+2067) in the name"),
    ("a\u200fb", "invisible or bidirectional formatting character (U+200F) in the name"),
    ("a\u0085b", "control character in the name"), ("\x7f", "control character in the name"),
    ("A/.RTJOB-PULL.JSONL", "reserved name (rtjob's own bookkeeping)"),
    ("a/.rtjob-pull.lock", "reserved name (rtjob's own bookkeeping)"),
    (".rtjob/pull.jsonl", "reserved name (rtjob's own bookkeeping)"), ("a/.RTJOB/x", "reserved name (rtjob's own bookkeeping)"),
    ("caf\u00e9/na\u00efve \u4e2d\u6587.pt", None),
])
def test_unsafe_reason_for_hidden_characters_and_reserved_names(rel, reason):
    from rtjob.storage.keys import unsafe_reason

    assert unsafe_reason(rel) == reason


# ---------------------------------------------------------------------------------------------
# hostile destinations: links under rtjob's own names, a second pull


@pytest.mark.parametrize("planted", [".rtjob", ".rtjob/pull.jsonl", ".rtjob/pull.lock",
                                     "checkpoint_epoch_0003/model.pt.rtjob-partial"])
@pytest.mark.parametrize("victim_exists", [True, False])
def test_a_link_planted_under_rtjobs_own_names_is_refused_and_nothing_is_written_through_it(
        s3, cli, tmp_path, planted, victim_exists):
    prefix = "runs/ddp/r-planted"
    upload(s3, prefix, run_tree())
    sandbox = tmp_path / "sandbox"
    dest, outside = sandbox / "dest", sandbox / "outside"
    outside.mkdir(parents=True)
    victim = outside / "victim"
    if victim_exists:
        victim.write_bytes(b"precious")
    (dest / planted).parent.mkdir(parents=True)
    (dest / planted).symlink_to(victim)

    line = one_line(cli("pull", f"s3://{BUCKET}/{prefix}", "--to", str(dest)), 2, "symbolic link",
                    str(dest / planted))
    assert "never writes through a link" in line
    assert (victim.read_bytes() == b"precious") if victim_exists else not victim.exists()
    assert list(outside.iterdir()) == ([victim] if victim_exists else [])
    assert (dest / planted).is_symlink()  # left for the user to look at


@pytest.mark.parametrize("kind", ["local", "s3", "manifest"])
def test_writes_never_follow_a_link_planted_after_the_checks(s3, tmp_path, monkeypatch, kind):
    """The race a check cannot close: a link planted between the check and the write. The write itself
    (O_NOFOLLOW) fails with ELOOP, reported for that file; what the link points to is untouched."""
    from rtjob.storage import location, opening
    from rtjob.storage.destination import Manifest
    from rtjob.storage.pull_plan import PullItem

    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    data = os.urandom(5000)
    if kind == "s3":
        upload(s3, "runs/ddp/r-race", {"model.pt": data})
        uri = f"s3://{BUCKET}/runs/ddp/r-race"
    else:
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "model.pt").write_bytes(data)
        uri = str(tmp_path / "src")
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"precious")
    dest = tmp_path / "dest"
    dest.mkdir()
    store = opening.open_store(location.parse_location(uri))
    [item] = store.list_files()
    if kind == "manifest":
        manifest = Manifest(dest)
        (dest / ".rtjob").mkdir()
        (dest / MANIFEST).symlink_to(victim)
        with pytest.raises(OSError) as caught:
            manifest.record(PullItem(item, "model.pt"), victim.stat())
        errors = [caught.value]
    else:
        (dest / "model.pt.rtjob-partial").symlink_to(victim)
        errors = []
        store.download([(item, dest / "model.pt.rtjob-partial")], lambda n: None,
                       lambda f, t, e: errors.append(e))
    store.close()
    assert len(errors) == 1 and isinstance(errors[0], OSError) and errors[0].errno == errno.ELOOP, errors
    assert victim.read_bytes() == b"precious"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str, timeout: float = 60) -> None:
    """Poll a condition while ``proc`` runs (no fixed sleep: the test goes on the moment it holds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the pull ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def test_a_second_pull_into_the_same_folder_exits_2_at_once_and_leaves_the_first_alone(s3, cli, env, tmp_path):
    prefix = "runs/ddp/r-locked"
    files = {"checkpoint_epoch_0001/model.pt": os.urandom(8 * 1024 * 1024),  # one GET, below the multipart size
             "checkpoint_epoch_0001/state.json": b'{"epoch": 1}'}
    upload(s3, prefix, files)
    uri, dest = f"s3://{BUCKET}/{prefix}", tmp_path / "dest"
    host, port = s3.endpoint.removeprefix("http://").rsplit(":", 1)
    proxy = DroppingProxy(host, int(port))
    proxy.rate = 128 * 1024  # the first pull trickles (a minute for the model) until the test lets it go
    first = popen_rtjob("pull", uri, "--to", str(dest), "--output", "json",
                        env={**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"})
    try:
        partial = dest / "checkpoint_epoch_0001" / "model.pt.rtjob-partial"
        # The partial file exists from the GET's start (the CRT engine writes a part only once it has all of it).
        wait_until(lambda: (dest / ".rtjob" / "pull.lock").exists() and partial.exists(), first,
                   "the first pull is writing its partial file")
        start = time.monotonic()
        second = cli("pull", uri, "--to", str(dest))  # straight to the server: it would finish first
        line = one_line(second, 2, "another rtjob pull is writing into this folder", str(dest))
        assert time.monotonic() - start < 30, line  # at once, not after the first one
        assert first.poll() is None and partial.exists()  # the first one's partial file is still there
        proxy.rate = None
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        proxy.close()
    assert first.returncode == 0, err
    assert json.loads(out)["downloaded"] == 2 and local_files(dest) == files and partials(dest) == []
    # The lock is released and removed with the pull: the next one goes ahead; the manifest stays, hidden.
    assert sorted(p.name for p in dest.iterdir()) == [".rtjob", "checkpoint_epoch_0001"]
    assert [p.name for p in (dest / ".rtjob").iterdir()] == ["pull.jsonl"]
    assert cli.json("pull", uri, "--to", str(dest))["skipped"] == 2


def test_an_older_pulls_manifest_in_the_folder_is_taken_over_and_removed(cli, tmp_path):
    """A folder an older rtjob pulled into (its manifest, .rtjob-pull.jsonl, in the folder itself): the next pull
    skips what that manifest records and keeps its record in .rtjob/ only; the user's folder holds the run's files
    and one hidden folder, no lock."""
    run, dest = tmp_path / "run", tmp_path / "dest"
    (run / "checkpoint_epoch_0001").mkdir(parents=True)
    (run / "checkpoint_epoch_0001" / "model.pt").write_bytes(b"weights")
    (run / "metrics.json").write_text("[]")
    assert cli.json("pull", str(run), "--to", str(dest), "--checkpoint", "all")["downloaded"] == 2
    (dest / MANIFEST).rename(dest / ".rtjob-pull.jsonl")  # as an older rtjob left it
    (dest / ".rtjob").rmdir()
    again = cli.json("pull", str(run), "--to", str(dest), "--checkpoint", "all")
    assert again["downloaded"] == 0 and again["skipped"] == 2
    assert sorted(p.name for p in dest.iterdir()) == [".rtjob", "checkpoint_epoch_0001", "metrics.json"]
    assert len((dest / MANIFEST).read_text().splitlines()) == 2


# ---------------------------------------------------------------------------------------------
# special files in local storage


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a socket's path must stay under the kernel's ~108 bytes, and tmp_path is too
    long for that under pytest-xdist (popen-gwN/ in it)."""
    path = Path(tempfile.mkdtemp(prefix="rtjob-sock-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_fifos_and_sockets_in_local_storage_are_skipped_listed_and_never_opened(cli, tmp_path, short_dir):
    run = short_dir / "run"
    files = {k: v for k, v in run_tree().items() if not k.endswith("/")}
    for rel, data in files.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(data)
    os.mkfifo(run / "checkpoint_epoch_0003" / "pipe")  # opening it to read would block until a writer comes
    (run / "checkpoint_epoch_0004").mkdir()
    os.mkfifo(run / "checkpoint_epoch_0004" / "metrics.json")  # a checkpoint whose metrics are a FIFO
    sock = socket.socket(socket.AF_UNIX)
    sock_path = run / "checkpoint_epoch_0003" / "sock"
    assert len(str(sock_path)) < 100
    sock.bind(str(sock_path))
    skipped = [{"key": "checkpoint_epoch_0003/pipe", "kind": "FIFO"},
               {"key": "checkpoint_epoch_0003/sock", "kind": "socket"},
               {"key": "checkpoint_epoch_0004/metrics.json", "kind": "FIFO"}]
    try:
        for choice in ("all", "best", "latest"):
            report = cli.json("pull", str(run), "--to", str(tmp_path / choice), "--checkpoint", choice)
            assert sorted(report["special_skipped"], key=lambda s: s["key"]) == skipped
            assert report["refused"] == [] and report["failed"] == []
        assert report["checkpoints"] == ["checkpoint_epoch_0003"]  # the FIFO-only folder is no checkpoint
        assert local_files(tmp_path / "all") == {**files, "metrics.json": files["checkpoint_epoch_0003/metrics.json"]}
        text = cli("pull", str(run), "--to", str(tmp_path / "text"), "--checkpoint", "all")
        assert text.returncode == 0
        assert "skipped checkpoint_epoch_0003/pipe: a FIFO, not a file (never opened)" in text.stderr
        assert "skipped checkpoint_epoch_0003/sock: a socket" in text.stderr
    finally:
        sock.close()


# ---------------------------------------------------------------------------------------------
# errors: one line, the documented code


def one_line(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("rtjob: error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_missing_bucket_wrong_endpoint_and_bad_input_give_one_clear_line(s3, cli, env, tmp_path):
    to = ("--to", str(tmp_path / "d"))
    one_line(cli("pull", "s3://no-such-bucket/runs/x", *to), 3, "bucket 'no-such-bucket' does not exist")
    one_line(cli("results", "s3://no-such-bucket/runs/x"), 3, "does not exist")

    closed = f"http://127.0.0.1:{_closed_port()}"
    patient = {**env, "RTJOB_STORAGE_PATIENCE_S": "1"}  # a refused connection may pass: waited out for 1 s, then exit 3
    start = time.monotonic()
    one_line(cli("pull", f"s3://{BUCKET}/runs/x", *to, env={**patient, "AWS_ENDPOINT_URL": closed}), 3,
             "cannot reach the S3 endpoint", closed)
    assert 1 <= time.monotonic() - start < 30
    one_line(cli("pull", f"s3://{BUCKET}/runs/x", *to, "--endpoint-url", closed, env=patient), 3, closed)

    no_keys = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    one_line(cli("pull", f"s3://{BUCKET}/runs/x", *to, env=no_keys), 3, "no AWS credentials")

    one_line(cli("pull", "gs://bucket/runs/x", *to), 2, "gs://")
    one_line(cli("pull", "s3://", *to), 2, "not an S3 URI")
    one_line(cli("pull", f"s3://{BUCKET}/nothing/here", *to), 2, "nothing stored at")
    one_line(cli("pull", f"s3://{BUCKET}/runs/x", *to, "--checkpoint", "best:val_loss:up"), 2, "min or max")
    one_line(cli("pull", f"s3://{BUCKET}/runs/x", *to, "--checkpoint", "newest"), 2, "latest, all or best")
    one_line(cli("pull", str(tmp_path / "no-such-folder"), *to), 2, "no such folder")
    not_dir = tmp_path / "a-file"
    not_dir.write_text("x")
    upload(s3, "runs/ddp/r-err", {"checkpoint_epoch_0001/model.pt": b"m"})
    one_line(cli("pull", f"s3://{BUCKET}/runs/ddp/r-err", "--to", str(not_dir)), 2, "not a folder")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens there


def test_denied_access_is_one_line_exit_3(tmp_path):
    """moto with IAM authentication switched on: real AccessDenied and InvalidAccessKeyId answers."""
    import boto3
    import requests

    with process_server() as (server, _proc):
        client = server.client()
        client.create_bucket(Bucket="locked")
        client.put_object(Bucket="locked", Key="runs/r/checkpoint_epoch_0001/model.pt", Body=b"weights")
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="nobody")
        nobody = iam.create_access_key(UserName="nobody")["AccessKey"]
        iam.create_user(UserName="lister")
        iam.put_user_policy(UserName="lister", PolicyName="list-only", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}]}))
        lister = iam.create_access_key(UserName="lister")["AccessKey"]
        assert requests.post(f"{server.endpoint}/moto-api/reset-auth", data=b"0", timeout=10).ok

        def pull_as(key_id: str, secret: str) -> subprocess.CompletedProcess[str]:
            env = base_env(tmp_path / "home", AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID=key_id,
                           AWS_SECRET_ACCESS_KEY=secret, AWS_DEFAULT_REGION="us-east-1",
                           AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
            proc = rtjob("pull", "s3://locked/runs/r", "--to", str(tmp_path / "d"), env=env, timeout=120)
            assert secret not in proc.stdout + proc.stderr and key_id not in proc.stdout + proc.stderr
            return proc

        one_line(pull_as(nobody["AccessKeyId"], nobody["SecretAccessKey"]), 3, "access denied", "s3://locked/runs/r")
        # Allowed to list, not to read: still a denial, in one line.
        one_line(pull_as(lister["AccessKeyId"], lister["SecretAccessKey"]), 3, "access denied reading")
        one_line(pull_as("AKIAAAAAAAAAAAAAAAAA", "not-a-real-secret-at-all"), 3, "authentication failed",
                 "InvalidAccessKeyId")
        assert not (tmp_path / "d" / "checkpoint_epoch_0001" / "model.pt").exists()
        assert not (tmp_path / "d").exists() or partials(tmp_path / "d") == []


# ---------------------------------------------------------------------------------------------
# local storage pulls the same


def test_local_storage_pulls_the_same_way(cli, tmp_path):
    run = tmp_path / "storage" / "ddp" / "r-local"
    files = {k: v for k, v in run_tree().items() if not k.endswith("/")}
    for rel, data in files.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(data)
    secret_dir = tmp_path / "private"
    secret_dir.mkdir()
    (secret_dir / "id_rsa").write_text("not for you")
    (run / "checkpoint_epoch_0003" / "leak").symlink_to(secret_dir / "id_rsa")

    for source in (str(run), f"file://{run}"):
        dest = tmp_path / ("dest-" + source[:4])
        report = cli.json("pull", source, "--to", str(dest), "--checkpoint", "best", code=1)
        assert report["checkpoints"] == ["checkpoint_epoch_0002"]
        assert report["refused"] == [{"key": "checkpoint_epoch_0003/leak", "reason": "symbolic link"}]
        got = local_files(dest)
        assert got["checkpoint_epoch_0002/model.pt"] == files["checkpoint_epoch_0002/model.pt"]
        assert got["metrics.json"] == files["checkpoint_epoch_0003/metrics.json"]
        assert not any("leak" in k for k in got)
    (run / "checkpoint_epoch_0003" / "leak").unlink()

    dest = tmp_path / "dest-all"
    first = cli.json("pull", str(run), "--to", str(dest), "--checkpoint", "all")
    assert first["downloaded"] == first["files"] == len(files) + 1  # + DIR/metrics.json
    again = cli.json("pull", str(run), "--to", str(dest), "--checkpoint", "all")
    assert again["downloaded"] == 0 and again["skipped"] == first["files"]
    (run / "checkpoint_epoch_0001" / "state.json").write_text('{"epoch": 1, "changed": true}')
    third = cli.json("pull", str(run), "--to", str(dest), "--checkpoint", "all")
    assert third["downloaded"] == 1
    assert local_files(dest) == {**files, "checkpoint_epoch_0001/state.json": b'{"epoch": 1, "changed": true}',
                                 "metrics.json": files["checkpoint_epoch_0003/metrics.json"]}
    # A pulled folder is itself a source (its bookkeeping is not part of the run).
    again = cli.json("pull", str(dest), "--to", str(tmp_path / "copy"), "--checkpoint", "all")
    assert again["refused"] == [] and local_files(tmp_path / "copy") == local_files(dest)


def test_a_bare_run_id_falls_back_to_local_storage_when_the_embedded_cluster_is_down(cli, env, tmp_path):
    home = Path(env["RTJOB_HOME"])
    run = home / "local" / "storage" / "ddp" / "t-offline-run"
    (run / "checkpoint_epoch_0001").mkdir(parents=True)
    (run / "checkpoint_epoch_0001" / "model.pt").write_bytes(b"weights")
    (run / "checkpoint_epoch_0001" / "metrics.json").write_text(json.dumps(history(1, VAL_LOSSES)))
    report = cli.json("pull", "t-offline-run", "--to", str(tmp_path / "d"))
    assert report["checkpoints"] == ["checkpoint_epoch_0001"]
    # An id nothing knows is bad input (exit 2) whether or not the cluster runs, pointing at `rtjob runs`.
    one_line(cli("pull", "t-never-ran", "--to", str(tmp_path / "e")), 2, "no run 't-never-ran'", "rtjob runs")


# ---------------------------------------------------------------------------------------------
# pure pieces


@pytest.mark.parametrize("rel,reason", [
    ("a/b.pt", None), ("checkpoint_epoch_0001/model.pt", None), ("..a/b..", None), ("dir with space/x", None),
    ("", "empty name"), ("/abs", "absolute path"), ("a//b", "empty path segment"), ("a/", "empty path segment"),
    ("../x", "'..' segment"), ("a/../../x", "'..' segment"), ("a/./b", "'.' segment"),
    ("a\\b", "backslash in the name"), ("a\x00b", "control character in the name"),
    ("x" * 256, "name longer than 255 bytes"), (".rtjob-pull.jsonl", "reserved name (rtjob's own bookkeeping)"),
])
def test_unsafe_reason(rel, reason):
    from rtjob.storage.keys import unsafe_reason

    assert unsafe_reason(rel) == reason


def test_locations_and_checkpoint_choices():
    from rtjob.core.errors import BadInput
    from rtjob.storage.layout import CheckpointChoice, parse_checkpoint_choice
    from rtjob.storage.location import parse_location

    loc = parse_location("s3://bucket/runs/ddp/r1/")
    assert (loc.scheme, loc.bucket, loc.path, loc.uri, loc.name) == ("s3", "bucket", "runs/ddp/r1",
                                                                    "s3://bucket/runs/ddp/r1", "r1")
    assert parse_location("s3://bucket").uri == "s3://bucket"
    assert parse_location("file:///tmp/x/r2").path == "/tmp/x/r2"
    for bad in ("s3://", "s3:///x", "gs://b/x", "file://relative", ""):
        with pytest.raises(BadInput):
            parse_location(bad)
    assert parse_checkpoint_choice("best") == CheckpointChoice("best", "val_loss", "min")
    assert parse_checkpoint_choice("best:val_accuracy") == CheckpointChoice("best", "val_accuracy", "max")
    assert parse_checkpoint_choice("best:train_loss:max") == CheckpointChoice("best", "train_loss", "max")
    assert parse_checkpoint_choice("ALL").kind == "all"


def test_job_storage_env_passes_the_endpoint_and_credentials_only_when_asked(monkeypatch):
    from rtjob.jobspec.run_env import job_storage_env

    client = {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ACCESS_KEY_ID": "AKIAAAAAAAAAAAAAAAAA",
              "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
    for var, value in client.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    plain = job_storage_env("s3://b/runs", None, {}, client_env=client)
    assert plain.env == {"AWS_ENDPOINT_URL": "http://minio:9000"} and plain.endpoint == "http://minio:9000"
    assert job_storage_env("/local/runs", None, {}, client_env=client).env == {}  # not S3: nothing to pass
    spec = job_storage_env("s3://b/runs", "http://spec:9000", {}, client_env=client)
    assert spec.env == {"AWS_ENDPOINT_URL_S3": "http://spec:9000"}
    own = job_storage_env("s3://b/runs", "http://spec:9000", {"AWS_ENDPOINT_URL": "http://own:1"}, client_env=client)
    assert own.env == {} and own.endpoint == "http://own:1"

    forwarded = job_storage_env("s3://b/runs", None, {"AWS_ACCESS_KEY_ID": "from-the-job"}, True, client_env=client)
    assert forwarded.sealed["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value"  # sealed (issue 45), never env_vars
    assert "AWS_SECRET_ACCESS_KEY" not in forwarded.env
    assert "AWS_ACCESS_KEY_ID" not in forwarded.sealed and any("sets AWS_ACCESS_KEY_ID itself" in n
                                                            for n in forwarded.notes)


def test_help_documents_exit_codes_and_stays_light():
    proc = subprocess.run([*RTJOB, "pull", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "1  some keys were refused" in proc.stdout
    code = ("import sys, rtjob.main; heavy = [m for m in ('boto3', 'botocore', 'matplotlib', 'rich', 'ray') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([RTJOB[0], "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
