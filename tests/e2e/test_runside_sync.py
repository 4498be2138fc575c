"""runside/sync.py: RTJOB_RUN_DIR (a real local folder) copied to the run's folder (a local folder and moto's S3):
settled files only, never one a process holds open for writing (but a live text file that keeps changing, after
max_wait_s), only objects this sync wrote are overwritten,
nothing deleted, a scan of an unchanged tree reads no file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from rtjob.storage import dir_sync as sync
from rtjob.storage.dir_sync import DirSync, held_for_writing, open_for_writing
from rtjob.storage.objects import PARTIAL_SUFFIX, LocalObjects, Objects
from rtjob.storage.opening import objects_for
from rtjob.storage.run_files import seed, written_by_run
from support.s3_server import S3Server, bucket_fixture

import rtjob_contract as contract

BUCKET = "sync-tests"
SETTLE = 0.2


s3 = bucket_fixture(BUCKET)


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Objects:
    if request.param == "local":
        return objects_for(str(tmp_path / "storage" / "run"))
    s3: S3Server = request.getfixturevalue("s3")
    for name, value in {**s3.env(), "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    return objects_for(f"s3://{BUCKET}/runs/{uuid.uuid4().hex[:12]}")


class Said(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def _data(objs: Objects, rel: str) -> bytes | None:
    got = objs.get(rel, 1 << 20)
    return None if got is None else got.data


def _until(scan: Callable[[], int], want: int = 1, timeout: float = 5.0) -> float:
    """Scan until ``want`` files in all were uploaded; the seconds it took."""
    start = time.monotonic()
    done = 0
    while done < want:
        assert time.monotonic() - start < timeout, f"{done} of {want} uploaded after {timeout} s"
        done += scan()
        time.sleep(0.02)
    return time.monotonic() - start


def test_a_file_open_for_writing_is_seen_as_held(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_text("x")
    with open(path, "rb"):
        assert not held_for_writing(str(path))  # open for reading holds nothing
    with open(path, "a") as f:
        f.write("y")
        assert held_for_writing(str(path))
        st = os.stat(path)
        assert (st.st_dev, st.st_ino) in open_for_writing()
    assert not held_for_writing(str(path))
    fd = os.open(path, os.O_RDWR)
    try:
        assert held_for_writing(str(path))
    finally:
        os.close(fd)


def test_a_settled_file_uploads_and_a_changed_one_again(tmp_path: Path, target: Objects) -> None:
    local = tmp_path / "run"
    (local / "sub").mkdir(parents=True)
    said = Said()
    dirsync = DirSync(str(local), target, settle_s=SETTLE, say=said)
    (local / "sub" / "metrics.json").write_text('{"loss": 1}')
    assert dirsync.scan() == 0  # not settled yet
    assert _until(dirsync.scan) >= SETTLE
    assert _data(target, "sub/metrics.json") == b'{"loss": 1}'
    assert dirsync.scan() == 0  # unchanged: nothing to do
    (local / "sub" / "metrics.json").write_text('{"loss": 0.25}')
    _until(dirsync.scan)  # its own object: overwritten (if_match on the version this sync wrote)
    assert _data(target, "sub/metrics.json") == b'{"loss": 0.25}'
    assert said == []


def test_a_file_a_process_holds_open_for_writing_waits_until_it_is_closed(tmp_path: Path,
                                                                         target: Objects) -> None:
    local = tmp_path / "run"
    local.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys\nf = open(sys.argv[1], 'w')\nf.write('partial'); f.flush()\n"
         "print('ready', flush=True)\nsys.stdin.readline()\nf.write(' and the rest'); f.close()\n",
         str(local / "train.log")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        dirsync = DirSync(str(local), target, settle_s=SETTLE, say=Said())
        deadline = time.monotonic() + 3 * SETTLE  # settled three times over, but still held
        while time.monotonic() < deadline:
            assert dirsync.scan() == 0
            time.sleep(0.05)
        assert target.head("train.log") is None
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.wait(10) == 0
    finally:
        writer.kill()
        writer.wait()
    _until(dirsync.scan)
    assert _data(target, "train.log") == b"partial and the rest"


def test_a_live_file_that_keeps_changing_is_uploaded_while_it_grows_and_a_checkpoint_still_waits(
        tmp_path: Path, target: Objects) -> None:
    """metrics.jsonl appended every 50 ms and metrics.json rewritten as often, both held open by the writer, never
    settle: each goes up once it has differed from its copy for max_wait_s. model.pt, written the same way, waits."""
    local = tmp_path / "run"
    local.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\n"
         "rows, whole, model = (open(f'{sys.argv[1]}/{n}', 'w') for n in ('metrics.jsonl', 'metrics.json', 'model.pt'))\n"
         "for step in range(10**6):\n"
         "    rows.write(json.dumps({'step': step, 'time': time.time()}) + '\\n'); rows.flush()\n"
         "    whole.seek(0); whole.truncate(); json.dump([{'epoch': step}], whole); whole.flush()\n"
         "    model.write('w' * 100); model.flush(); time.sleep(0.05)\n",
         str(local)])
    try:
        dirsync = DirSync(str(local), target, settle_s=SETTLE, max_wait_s=0.5, say=Said())
        _until(dirsync.scan, want=2)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # each again, while it grows
            dirsync.scan()
            time.sleep(0.05)
        assert writer.poll() is None  # all three still open, none settled
        # A snapshot: its whole lines are a prefix of the rows (a reader skips a last line not ended yet).
        whole = [json.loads(line) for line in (_data(target, "metrics.jsonl") or b"").decode().split("\n")[:-1]]
        assert len(whole) >= 5 and [row["step"] for row in whole] == list(range(len(whole)))
        assert target.head("metrics.json") is not None
        assert target.head("model.pt") is None  # not text: it waits until it is settled and closed
    finally:
        writer.kill()
        writer.wait()
    _until(dirsync.scan, want=3)  # now closed: settled
    assert target.head("model.pt") is not None


def test_an_object_this_sync_did_not_write_is_never_overwritten(tmp_path: Path, target: Objects) -> None:
    local = tmp_path / "run"
    local.mkdir()
    target.put("results.csv", b"someone else's")
    (local / "results.csv").write_text("the script's")
    (local / "mine.txt").write_text("v1")
    said = Said()
    dirsync = DirSync(str(local), target, settle_s=SETTLE, say=said)
    assert dirsync.scan(final=True) == 1  # mine.txt only
    assert _data(target, "results.csv") == b"someone else's"
    assert len(said) == 1 and "results.csv" in said[0] and "not overwritten" in said[0]
    (local / "results.csv").write_text("the script's, changed")
    assert dirsync.scan(final=True) == 0 and len(said) == 1  # said once
    target.put("mine.txt", b"another writer's")  # written over by someone else after this sync's upload
    (local / "mine.txt").write_text("v2")
    assert dirsync.scan(final=True) == 0
    assert _data(target, "mine.txt") == b"another writer's"
    assert len(said) == 2 and "mine.txt" in said[1]


def test_a_retry_replaces_what_earlier_attempts_wrote_and_never_what_no_attempt_wrote(
        tmp_path: Path, target: Objects) -> None:
    """Three attempts of one run, each in a fresh node folder seeded from the run's storage (as on a new node or
    a new cluster): each replaces what an earlier attempt wrote; an object no attempt wrote (there before the run,
    or changed by someone else between attempts) is never overwritten, said in one line."""
    target.put("theirs.csv", b"there before the run")
    first = tmp_path / "node-1"
    first.mkdir()
    (first / "metrics.json").write_text('[{"epoch": 1}]')
    (first / "ckpt.txt").write_text("epoch 1")
    (first / "theirs.csv").write_text("the script's")
    said = Said()
    one = DirSync(str(first), target, settle_s=SETTLE, say=said, attempt_id="run")
    assert one.scan(final=True) == 2 and one.complete
    assert _data(target, "theirs.csv") == b"there before the run" and len(one.notes) == 1
    assert sorted(written_by_run(target)) == ["ckpt.txt", "metrics.json"]

    second = tmp_path / "node-2"
    second.mkdir()
    seeded = seed(target, str(second))  # what the run synced to storage, not what node 1 left
    assert sorted(seeded.ours) == ["ckpt.txt", "metrics.json"] and seeded.others == 1
    assert sorted(p.name for p in second.iterdir()) == ["ckpt.txt", "metrics.json"]  # no rtjob files, not theirs
    assert (second / "ckpt.txt").read_text() == "epoch 1"  # a script resumes from it
    two = DirSync(str(second), target, settle_s=SETTLE, say=said, attempt_id="run-retry1")
    two.adopt(seeded)
    assert two.scan(final=True) == 0  # unchanged: nothing uploaded again
    (second / "metrics.json").write_text('[{"epoch": 1}, {"epoch": 2}]')
    (second / "theirs.csv").write_text("the retry's")
    assert two.scan(final=True) == 1
    assert _data(target, "metrics.json") == b'[{"epoch": 1}, {"epoch": 2}]'  # the retry's rows
    assert _data(target, "theirs.csv") == b"there before the run"
    assert "theirs.csv is already there, not written by any attempt of this run: left as it is" in two.notes[-1]

    target.put("ckpt.txt", b"someone else's, between attempts")
    third = tmp_path / "node-3"
    third.mkdir()
    seeded = seed(target, str(third))
    assert sorted(seeded.ours) == ["metrics.json"] and seeded.others == 2
    three = DirSync(str(third), target, settle_s=SETTLE, say=said, attempt_id="run-retry2")
    three.adopt(seeded)
    (third / "metrics.json").write_text('[{"epoch": 3}]')
    (third / "ckpt.txt").write_text("epoch 3")
    assert three.scan(final=True) == 1
    assert _data(target, "metrics.json") == b'[{"epoch": 3}]'
    assert _data(target, "ckpt.txt") == b"someone else's, between attempts"
    assert sorted(item.rel for item in target.list("rtjob-sync")) == [
        "rtjob-sync/run-retry1.json", "rtjob-sync/run-retry2.json", "rtjob-sync/run.json"]


def test_final_uploads_everything_now_and_nothing_is_ever_deleted(tmp_path: Path, target: Objects) -> None:
    local = tmp_path / "run"
    (local / "a" / "b").mkdir(parents=True)
    (local / "a" / "b" / "deep.txt").write_text("deep")
    (local / ".hidden-tmp").write_text("the script's business")
    (local / ("x" + PARTIAL_SUFFIX)).write_text("rtjob's temporary name")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's")
    (local / "link.txt").symlink_to(outside / "secret.txt")
    (local / "linked-folder").symlink_to(outside)
    dirsync = DirSync(str(local), target, settle_s=60, say=Said())
    with open(local / "still-open.log", "w") as f:
        f.write("the last line")
        f.flush()
        assert dirsync.scan() == 0  # not settled (60 s), and held
        assert dirsync.scan(final=True) == 3  # the script has ended: all of it, settled or not
    assert sorted(item.rel for item in target.list()) == [".hidden-tmp", "a/b/deep.txt", "still-open.log"]
    assert _data(target, "still-open.log") == b"the last line"
    (local / "a" / "b" / "deep.txt").unlink()
    (local / ".hidden-tmp").unlink()
    assert dirsync.scan(final=True) == 0
    assert sorted(item.rel for item in target.list()) == [".hidden-tmp", "a/b/deep.txt", "still-open.log"]


def test_a_file_changed_during_its_upload_is_uploaded_again(tmp_path: Path) -> None:
    local = tmp_path / "run"
    local.mkdir()
    (local / "ckpt.bin").write_bytes(b"first")

    class AppendsDuringUpload(LocalObjects):
        """The local target, with the script appending to the file while its first upload runs."""

        appended = False

        def put_file(self, rel: str, path: str, *, if_match: str | None = None, if_absent: bool = False) -> str:
            etag = super().put_file(rel, path, if_match=if_match, if_absent=if_absent)
            if not self.appended:
                self.appended = True
                with open(path, "ab") as f:
                    f.write(b" and more")
            return etag

    objs = AppendsDuringUpload(objects_for(str(tmp_path / "storage")).location)
    dirsync = DirSync(str(local), objs, settle_s=SETTLE, say=Said())
    _until(dirsync.scan)
    assert _data(objs, "ckpt.bin") == b"first"
    _until(dirsync.scan)
    assert _data(objs, "ckpt.bin") == b"first and more"


def test_an_unchanged_tree_is_scanned_by_stat_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "run"
    for i in range(10):
        (local / f"d{i}").mkdir(parents=True)
        for j in range(100):
            (local / f"d{i}" / f"f{j}.txt").write_text(f"{i}-{j}")
    # The first upload of 1,000 files (a lock and an fsync each) is quickest in memory where there is /dev/shm.
    shm = Path("/dev/shm")
    storage = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path / "storage"
    try:
        target = objects_for(str(storage))
        dirsync = DirSync(str(local), target, settle_s=SETTLE, say=Said())
        assert dirsync.scan(final=True) == 1000
        _scan_by_stat_alone(dirsync, target, monkeypatch)
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def _scan_by_stat_alone(dirsync: DirSync, target: Objects, monkeypatch: pytest.MonkeyPatch) -> None:

    def forbidden(*args: object, **kwargs: object) -> object:
        raise AssertionError("an unchanged tree's scan read a file or /proc")

    monkeypatch.setattr(sync, "open_for_writing", forbidden)
    monkeypatch.setattr(target, "put_file", forbidden)
    monkeypatch.setattr("builtins.open", forbidden)
    start = time.process_time()
    assert dirsync.scan() == 0
    assert time.process_time() - start < 1.0


def test_a_failing_upload_is_one_line_and_retried(tmp_path: Path, s3: S3Server,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**s3.env(), "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    bucket = f"later-{uuid.uuid4().hex[:8]}"
    target = objects_for(f"s3://{bucket}/run")  # the bucket does not exist yet
    local = tmp_path / "run"
    local.mkdir()
    (local / "out.txt").write_text("kept for later")
    said = Said()
    dirsync = DirSync(str(local), target, settle_s=SETTLE, say=said)
    assert dirsync.scan(final=True) == 0
    assert dirsync.scan(final=True) == 0
    assert len(said) == 1 and f"s3://{bucket}/run/out.txt" in said[0] and "\n" not in said[0]
    assert s3.secret_key not in said[0]
    s3.client().create_bucket(Bucket=bucket)
    assert dirsync.scan(final=True) == 1
    assert _data(target, "out.txt") == b"kept for later"


def test_a_manifest_not_written_counts_as_not_stored_until_it_is(tmp_path: Path) -> None:
    local = tmp_path / "run"
    local.mkdir()
    (local / "model.txt").write_text("final")

    class RefusesTheManifestOnce(LocalObjects):
        """The local target, refusing the first write of the manifest (storage went down right after the file)."""

        refused = False

        def put(self, rel: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False) -> str:
            if rel.startswith(contract.RUN_SYNC_DIR) and not self.refused:
                self.refused = True
                raise OSError("storage unreachable")
            return super().put(rel, data, if_match=if_match, if_absent=if_absent)

    objs = RefusesTheManifestOnce(objects_for(str(tmp_path / "storage")).location)
    dirsync = DirSync(str(local), objs, settle_s=SETTLE, say=Said(), attempt_id="run")
    assert dirsync.scan(final=True) == 1
    assert not dirsync.complete  # the file is there, the manifest that calls it the run's is not
    assert dirsync.not_stored() == [contract.sync_manifest_name("run")]
    assert dirsync.scan(final=True) == 0
    assert dirsync.complete and dirsync.not_stored() == []
