"""Run records and archived logs in a run's storage (storage/records.py), against a real S3 server on loopback
(moto, in this process: about a second to start, once per module) and a local folder: round trips, a team's
runs listed from a bucket by delimiter listings and one GET per run, problems reported as lines, never a crash,
and no symbolic link followed in local storage."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from rtjob.core.errors import BadInput, Unreachable
from rtjob.core.record import RECORD_SCHEMA, RunRecord
from rtjob.storage import records
from rtjob.storage.records import (
    archive_attempt_log,
    checkpoints,
    find_record,
    list_records,
    log_chunks,
    metrics_summary,
    read_record,
    write_log,
)
from support.planted import plant_record
from support.s3_server import S3Server, bucket_fixture, in_env

from rtjob_contract import DRIVER_LOG_FILE, RUN_RECORD_FILE, attempt_log_name, log_part_name

BUCKET = "records-tests"


s3 = bucket_fixture(BUCKET)


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    return in_env(s3, monkeypatch)


class Root:
    """A storage root (``<root>/<job>/<run id>/``) on S3 or in a local folder, and raw access to plant files."""

    def __init__(self, uri: str, endpoint: str | None, put: Callable[[str, bytes], None]) -> None:
        self.uri, self.endpoint, self.put = uri, endpoint, put

    def run(self, job: str, run_id: str) -> str:
        return f"{self.uri}/{job}/{run_id}"


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Root:
    if request.param == "local":
        base = tmp_path / "storage"

        def put_local(rel: str, data: bytes) -> None:
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        return Root(str(base), None, put_local)
    server: S3Server = request.getfixturevalue("s3_env")
    client = server.client()
    prefix = f"teams/{os.urandom(4).hex()}"

    def put_s3(rel: str, data: bytes) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=data)

    return Root(f"s3://{BUCKET}/{prefix}", server.endpoint, put_s3)


def record(run_id: str, job: str, start: str | None, **extra: Any) -> RunRecord:
    return RunRecord(id=run_id, job=job, backend="embedded", status="SUCCEEDED", start_time=start,
                     git={"commit": "0" * 40, "dirty": False, "branch": "main"},
                     request={"entrypoint": "python -m training.train", "env": {"TOKEN": "***"}}, **extra)


def history(val_losses: list[float]) -> list[dict[str, float]]:
    return [{"epoch": e, "train_loss": 2.0 / e, "val_loss": v, "val_accuracy": 0.5 + e / 20}
            for e, v in enumerate(val_losses, start=1)]


def test_record_and_logs_round_trip(root: Root) -> None:
    run = root.run("ddp-resnet", "r1")
    assert read_record(run, root.endpoint) is None  # nothing written yet
    written = record("r1", "ddp-resnet", "2026-11-20T10:00:00+00:00", attempts=[{"id": "r1", "status": "FAILED"}])
    plant_record(run, written, root.endpoint)
    assert read_record(run, root.endpoint) == written
    written.status, written.archived = "FAILED", True  # the record is replaced whole at the end
    plant_record(run, written, root.endpoint)
    assert read_record(run, root.endpoint) == written

    assert log_chunks(run, root.endpoint, "r1") is None
    text = "epoch 1 loss 0.5\nünïcode ✓\n"
    assert write_log(run, DRIVER_LOG_FILE, text, root.endpoint) == "logs/driver.log"
    assert write_log(run, attempt_log_name("r1"), "first attempt\n", root.endpoint) == "logs/r1.log"
    assert "".join(log_chunks(run, root.endpoint, "r1") or []) == text  # no parts: the archived driver.log
    assert "".join(log_chunks(run, root.endpoint, "r1", latest=False) or []) == "first attempt\n"  # --attempt 1
    assert log_chunks(run, root.endpoint, "r1-retry9", latest=False) is None
    # An attempt whose companion died with its node: its parts joined into logs/<attempt>.log, created once.
    from rtjob.storage.opening import objects_for

    with objects_for(run, root.endpoint) as objects:
        objects.put(log_part_name("r1-retry1", 0), b"part one\n")
        objects.put(log_part_name("r1-retry1", 1), b"part two\n")
    assert archive_attempt_log(run, root.endpoint, "r1-retry1") == "logs/r1-retry1.log"
    with objects_for(run, root.endpoint) as objects:
        got = objects.get("logs/r1-retry1.log", 1024)
        assert got is not None and got.data == b"part one\npart two\n"
        objects.put(log_part_name("r1-retry1", 2), b"late\n")
    assert archive_attempt_log(run, root.endpoint, "r1-retry1") == "logs/r1-retry1.log"  # never replaced
    with objects_for(run, root.endpoint) as objects:
        assert objects.get("logs/r1-retry1.log", 1024).data == b"part one\npart two\n"  # type: ignore[union-attr]
    assert archive_attempt_log(run, root.endpoint, "r1-retry5") is None  # no parts: nothing
    assert "".join(log_chunks(run, root.endpoint, "r1", tail_lines=1) or []) == "ünïcode ✓\n"
    assert stored_log(run, attempt_log_name("r1"), root.endpoint) == "first attempt\n"
    root.put("ddp-resnet/r1/logs/raw.log", b"ok \xff\xfe bytes\n")  # a log that is not UTF-8 still reads
    assert stored_log(run, "raw.log", root.endpoint) == "ok \ufffd\ufffd bytes\n"
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(BadInput):
            write_log(run, bad, "x", root.endpoint)


def test_list_records_newest_first_job_filter_and_problems(root: Root) -> None:
    plant_record(root.run("a", "old"), record("old", "a", "2026-11-01T08:00:00+00:00"), root.endpoint)
    plant_record(root.run("a", "new"), record("new", "a", "2026-11-03T08:00:00Z"), root.endpoint)
    plant_record(root.run("b", "mid"), record("mid", "b", None, submitted_at="2026-11-02T08:00:00+00:00"),
                 root.endpoint)
    root.put("b/older-rtjob-run/checkpoint_epoch_0001/model.pt", b"w")  # a run folder without a record
    root.put(f"b/corrupt/{RUN_RECORD_FILE}", b"{not json")
    future = record("future", "b", "2026-11-04T08:00:00+00:00").to_json() | {"schema": RECORD_SCHEMA + 1}
    root.put(f"b/future/{RUN_RECORD_FILE}", json.dumps(future).encode())
    root.put(f"b/back\\slash/{RUN_RECORD_FILE}", record("x", "b", None).dumps().encode())  # no path rtjob names

    listed = list_records(root.uri, root.endpoint)
    assert [r.id for r in listed.records] == ["new", "mid", "old"]
    assert listed.without_record == 1 and listed.jobs == 2
    assert len(listed.problems) == 3
    assert f"{root.uri}/b: skipped a folder named 'back\\\\slash' (not a plain folder name)" in listed.problems
    corrupt = next(p for p in listed.problems if "corrupt" in p)
    assert corrupt == f"{root.uri}/b/corrupt/{RUN_RECORD_FILE}: not valid JSON " + corrupt.split("not valid JSON ")[1]
    assert "\n" not in corrupt
    newer = next(p for p in listed.problems if "future" in p)
    assert f"schema {RECORD_SCHEMA + 1}" in newer and "upgrade rtjob" in newer

    only_a = list_records(root.uri, root.endpoint, job="a")
    assert [r.id for r in only_a.records] == ["new", "old"] and not only_a.problems and only_a.without_record == 0
    assert list_records(root.uri, root.endpoint, job="nope").records == []
    with pytest.raises(BadInput):
        list_records(root.uri, root.endpoint, job="a/b")


def test_find_record_under_any_job(root: Root) -> None:
    written = record("r7", "mnist", "2026-11-05T08:00:00+00:00")
    plant_record(root.run("mnist", "r7"), written, root.endpoint)
    plant_record(root.run("other", "r8"), record("r8", "other", None), root.endpoint)
    assert find_record(root.uri, "r7", root.endpoint) == (root.run("mnist", "r7"), written)
    assert find_record(root.uri, "r9", root.endpoint) is None
    root.put(f"other/broken/{RUN_RECORD_FILE}", b"[]")
    with pytest.raises(BadInput, match="not an rtjob run record"):
        find_record(root.uri, "broken", root.endpoint)
    with pytest.raises(BadInput):
        find_record(root.uri, "../r7", root.endpoint)


def test_checkpoints_and_metrics_summary(root: Root) -> None:
    run = root.run("mnist", "r1")
    assert checkpoints(run, root.endpoint) == [] and metrics_summary(run, root.endpoint) is None
    rows = history([0.9, 0.4, 0.6])
    for epoch in (1, 2, 3, 10):
        ckpt = f"mnist/r1/checkpoint_epoch_{epoch:04d}"
        root.put(f"{ckpt}/model.pt", b"m" * (100 * epoch))
        root.put(f"{ckpt}/metrics.json", json.dumps(rows[:epoch]).encode())
    plant_record(run, record("r1", "mnist", None), root.endpoint)

    found = checkpoints(run, root.endpoint)
    assert [c["name"] for c in found] == [f"checkpoint_epoch_{e:04d}" for e in (1, 2, 3, 10)]  # natural order
    first_size = 100 + len(json.dumps(rows[:1]))
    assert found[0]["files"] == 2 and found[0]["bytes"] == first_size
    assert found[1]["metrics"] == rows[1] and found[3]["metrics"] is None  # the history has no epoch 10

    summary = metrics_summary(run, root.endpoint)
    assert summary is not None
    assert summary["best_epoch"] == 2 and summary["best_val_loss"] == 0.4 and summary["epochs"] == 3
    assert summary["last"] == rows[-1] and summary["source"].endswith("checkpoint_epoch_0010/metrics.json")

    no_history = root.run("mnist", "r2")
    root.put("mnist/r2/checkpoint_epoch_0001/model.pt", b"m")
    assert metrics_summary(no_history, root.endpoint) is None
    assert checkpoints(no_history, root.endpoint)[0]["metrics"] is None
    root.put("mnist/r3/metrics.json", b"{broken")
    with pytest.raises(BadInput, match="cannot read the metrics history"):
        metrics_summary(root.run("mnist", "r3"), root.endpoint)


def test_listing_uses_delimiters_never_every_key(s3_env: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's checkpoint keys cost the listing nothing: one delimiter listing of the root, one per job folder, one
    GET per run, however many keys a run holds. Requests are counted (botocore's event hook), not timed."""
    client = s3_env.client()
    uri = f"s3://{BUCKET}/many"
    for job, run_id in (("big", "r1"), ("big", "r2"), ("small", "r3")):
        plant_record(f"{uri}/{job}/{run_id}", record(run_id, job, None), s3_env.endpoint)
    keys = [f"many/big/r1/checkpoint_epoch_{i // 4:04d}/shard_{i:05d}.bin" for i in range(40)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=BUCKET, Key=key, Body=b"x"), keys))

    calls: list[tuple[str, dict[str, Any]]] = []
    real_open = records.open_store

    def counting_open(*args: Any, **kwargs: Any) -> Any:
        store = real_open(*args, **kwargs)
        store.client.meta.events.register(
            "before-parameter-build.s3", lambda params, model, **_: calls.append((model.name, dict(params))))
        return store

    monkeypatch.setattr(records, "open_store", counting_open)
    listed = list_records(uri, s3_env.endpoint)
    assert sorted(r.id for r in listed.records) == ["r1", "r2", "r3"]
    lists = [params for name, params in calls if name == "ListObjectsV2"]
    gets = [params["Key"] for name, params in calls if name == "GetObject"]
    assert len(lists) == 3 and all(params.get("Delimiter") == "/" for params in lists)  # root, big/, small/
    assert sorted(gets) == sorted(f"many/{j}/{r}/{RUN_RECORD_FILE}" for j, r in
                                  (("big", "r1"), ("big", "r2"), ("small", "r3")))
    assert len(calls) == 6

    calls.clear()
    assert find_record(uri, "r2", s3_env.endpoint) is not None
    assert [name for name, _ in calls].count("ListObjectsV2") == 1 and len(calls) == 3  # + one GET per job


def test_missing_bucket_is_one_line(s3_env: S3Server) -> None:
    with pytest.raises(Unreachable, match="bucket 'no-such-bucket' does not exist"):
        list_records("s3://no-such-bucket/runs", s3_env.endpoint)


def test_local_links_are_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "storage"
    run = root / "job" / "r1"
    run.mkdir(parents=True)
    secret = tmp_path / "elsewhere.json"
    secret.write_text("keep me")
    (run / RUN_RECORD_FILE).symlink_to(secret)

    # Reading: a link where the record goes is refused, in one line; listing reports it as a problem.
    with pytest.raises(BadInput, match="symbolic link"):
        read_record(str(run), None)
    listed = list_records(str(root), None)
    assert listed.records == [] and len(listed.problems) == 1 and "symbolic link" in listed.problems[0]

    # Writing: the link is replaced by the record, the file it pointed to is untouched.
    plant_record(str(run), record("r1", "job", None), None)
    assert not (run / RUN_RECORD_FILE).is_symlink() and secret.read_text() == "keep me"
    assert read_record(str(run), None) == record("r1", "job", None)
    assert [p.name for p in run.iterdir()] == [RUN_RECORD_FILE]  # no temporary file left behind

    # A linked logs folder is not written through; a linked run or job folder is not listed.
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "logs").symlink_to(outside)
    with pytest.raises(BadInput, match="not a folder"):
        write_log(str(run), DRIVER_LOG_FILE, "x", None)
    assert list(outside.iterdir()) == []
    other = tmp_path / "other-run"
    other.mkdir()
    plant_record(str(other), record("r2", "job", None), None)
    (root / "job" / "r2").symlink_to(other)
    (root / "linked-job").symlink_to(root / "job")
    assert [r.id for r in list_records(str(root), None).records] == ["r1"]
    assert list_records(str(tmp_path / "nothing-here"), None).records == []


def test_wait_of_anothers_run_keeps_their_record_and_archives_the_log(s3_env: S3Server, tmp_path: Path) -> None:
    """A teammate asks about a run someone else submitted (a real Ray Jobs API stand-in on loopback, real S3):
    `status` only reads (their record is left as it is); `wait`, which carries the run, archives it: their record
    in storage keeps its spec and gains the archived log; a run with no record in storage gets none written there
    (its log is archived on this machine)."""
    import json

    from support.cli import base_env, run_in_process
    from support.http_faults import StandIn, json_body

    theirs = RunRecord(id="r-theirs", job="a", backend="ray", status="RUNNING", spec={"document": {"name": "a"}},
                       spec_hash="h", submitted_at="2026-11-20T10:00:00+00:00", user="alice")
    plant_record(f"s3://{BUCKET}/team/a/r-theirs", theirs, s3_env.endpoint)

    def respond(method: str, path: str) -> tuple[int, str, bytes]:
        run_id = path.split("/")[3]
        if path.endswith("/logs"):
            return 200, "application/json", json_body({"logs": f"log of {run_id}\n"})
        return 200, "application/json", json_body({
            "submission_id": run_id, "job_id": None, "type": "SUBMISSION", "status": "SUCCEEDED",
            "entrypoint": "python x.py", "message": "done", "start_time": 1_700_000_000_000,
            "end_time": 1_700_000_060_000, "runtime_env": {},
            "metadata": {"rtjob.job": "a", "rtjob.storage_uri": f"s3://{BUCKET}/team/a/{run_id}",
                         "rtjob.storage_endpoint": s3_env.endpoint}})

    env = {**base_env(tmp_path / "home"), **s3_env.env(), "AWS_EC2_METADATA_DISABLED": "true"}
    with StandIn(respond) as server:
        for command in ("status", "wait"):
            for run_id in ("r-theirs", "r-seen"):
                proc = run_in_process(command, run_id, "--backend", "ray", "--address", server.address, env=env)
                assert proc.returncode == 0, proc.stderr
            if command == "status":  # a read: their record is left as it is
                unchanged = read_record(f"s3://{BUCKET}/team/a/r-theirs", s3_env.endpoint)
                assert unchanged is not None and unchanged.status == "RUNNING"
    kept = read_record(f"s3://{BUCKET}/team/a/r-theirs", s3_env.endpoint)
    assert kept is not None and kept.spec == {"document": {"name": "a"}} and kept.user == "alice"
    assert kept.status == "SUCCEEDED" and kept.archived and kept.logs == ["logs/driver.log"]
    assert stored_log(f"s3://{BUCKET}/team/a/r-theirs", "driver.log", s3_env.endpoint) == "log of r-theirs\n"
    assert read_record(f"s3://{BUCKET}/team/a/r-seen", s3_env.endpoint) is None
    local = tmp_path / "home" / "runs" / "r-seen" / "logs" / "driver.log"
    assert local.read_text() == "log of r-seen\n"
    listed = json.loads(run_in_process("runs", "-o", "json", env=env).stdout)
    assert {r["id"] for r in listed} == {"r-theirs", "r-seen"}


def test_a_run_folder_with_only_rtjobs_own_files_has_nothing_stored(tmp_path: Path) -> None:
    """rtjob writes the record and logs at submit: a run that then wrote nothing is still 'nothing stored'
    (results and pull say the run ended without writing results, not 'no metrics history')."""
    from rtjob.storage.layout import NothingStored
    from rtjob.storage.location import parse_location
    from rtjob.storage.results import history_from_location

    run = tmp_path / "job" / "r1"
    plant_record(str(run), RunRecord(id="r1", job="job", backend="local"), None)
    write_log(str(run), DRIVER_LOG_FILE, "hello\n", None)
    with pytest.raises(NothingStored):
        history_from_location(parse_location(str(run)))
    (run / "notes.txt").write_text("the run's own file\n")
    with pytest.raises(BadInput) as caught:
        history_from_location(parse_location(str(run)))
    assert not isinstance(caught.value, NothingStored)


def test_a_new_field_is_additive_records_of_either_age_are_read() -> None:
    """train_storage came after schema 1's first records: an older record reads with none, and a record from a
    newer rtjob with a field this one does not know reads without it (the schema is bumped only for a change of
    meaning)."""
    from rtjob.core.record import RECORD_SCHEMA, RunRecord

    older = RunRecord.loads('{"id": "r1", "job": "j", "backend": "local", "schema": 1}', "old")
    assert older.train_storage == [] and RECORD_SCHEMA == 1
    newer = RunRecord(id="r2", job="j", backend="local", train_storage=["/tmp/mine/exp"]).to_json()
    assert RunRecord.from_json({**newer, "from_the_future": 1}, "new").train_storage == ["/tmp/mine/exp"]


def stored_log(run_uri: str, name: str, endpoint: str | None) -> str:
    """One stored log file, whole (a test's small log), as rtjob's readers decode it."""
    from rtjob.storage.opening import objects_for

    with objects_for(run_uri, endpoint) as objects:
        return b"".join(objects.stream(f"logs/{name}")).decode("utf-8", errors="replace")
