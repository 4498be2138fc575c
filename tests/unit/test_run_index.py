"""The run index beside a team's records (storage/index.py), on a real S3 server on loopback (moto, in this
process) and a local folder: entries and compaction, a later status winning, filters, two compactors at once,
a reader racing a compactor, `rtjob runs --storage` served from the index, and `--reindex` from the records."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
from rtjob.core.errors import BadInput
from rtjob.core.model import RunInfo, RunStatus
from rtjob.core.record import RunRecord
from rtjob.storage import index
from rtjob.storage.index import compact, index_objects, read_index, write_entry, write_run_entry
from rtjob.storage.run_filter import RunFilter
from support.planted import plant_record
from support.s3_server import S3Server, bucket_fixture, in_env

from rtjob_contract import INDEX_ENTRIES_DIR, INDEX_OBJECTS_DIR

BUCKET = "index-tests"
T0 = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.timezone.utc)


s3 = bucket_fixture(BUCKET)


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    return in_env(s3, monkeypatch)


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "storage")
    request.getfixturevalue("s3_env")
    return f"s3://{BUCKET}/teams/{os.urandom(4).hex()}"


def run(i: int, status: str = "RUNNING", job: str = "train", user: str = "alice", root: str = "") -> RunRecord:
    start = (T0 + dt.timedelta(minutes=i)).isoformat()
    return RunRecord(id=f"r{i:03d}", job=job, backend="ray", status=status, submitted_at=start, start_time=start,
                     user=user, storage_uri=f"{root}/{job}/r{i:03d}" if root else None,
                     git={"commit": "c" * 40, "dirty": False, "branch": "main"}, cost={"estimated_usd": 0.5 + i},
                     spec={"document": {"name": job}})


def ids(rows: list[dict[str, object]]) -> list[object]:
    return [row["id"] for row in rows]


def test_entries_compact_into_one_object_and_a_later_status_wins(root: str) -> None:
    objects = index_objects(root)
    for i in range(6):
        write_entry(root, None, run(i), now=T0 + dt.timedelta(seconds=i))
    snapshot = read_index(objects)
    assert ids(list(snapshot.runs())) == ["r005", "r004", "r003", "r002", "r001", "r000"]  # newest start first
    key = compact(objects, snapshot)
    assert [item.rel for item in objects.list("rtjob-index")] == [key]  # the entries it holds are gone

    # The run's end, written later: it wins over the compacted RUNNING, and the first page parses what it shows.
    write_entry(root, None, run(2, "SUCCEEDED"), now=T0 + dt.timedelta(hours=1))
    write_entry(root, None, run(9, "FAILED", job="eval", user="bob"), now=T0 + dt.timedelta(hours=1))
    snapshot = read_index(objects)
    rows = list(snapshot.runs())
    assert ids(rows) == ["r009", "r005", "r004", "r003", "r002", "r001", "r000"]
    assert [r["status"] for r in rows if r["id"] == "r002"] == ["SUCCEEDED"]
    assert ids(list(snapshot.runs(RunFilter(limit=2)))) == ["r009", "r005"]
    assert ids(list(snapshot.runs(RunFilter(job="eval")))) == ["r009"]
    assert ids(list(snapshot.runs(RunFilter(user="alice", status=RunStatus.SUCCEEDED)))) == ["r002"]
    assert ids(list(snapshot.runs(RunFilter(since=T0 + dt.timedelta(minutes=4))))) == ["r009", "r005", "r004"]

    # An entry older than the compacted row (written late, or not yet deleted) never brings an old state back.
    write_entry(root, None, run(2, "PENDING"), now=T0 - dt.timedelta(hours=1))
    compact(objects, read_index(objects))
    again = read_index(objects)
    assert sorted(ids(list(again.runs()))) == ["r000", "r001", "r002", "r003", "r004", "r005", "r009"]
    assert [r["status"] for r in again.runs() if r["id"] == "r002"] == ["SUCCEEDED"]
    assert again.leftover() == 0
    # An entry's details (the UI's runs table: tags, args, final metrics) are read back, also once compacted.
    (r9,) = [r for r in again.runs() if r["id"] == "r009"]
    assert (r9["attempts"], r9["tags"], r9["args"]) == (1, {}, {}) and "final_metrics" in r9


def test_a_row_prints_as_its_record_would() -> None:
    record = run(3, "SUCCEEDED", root="s3://b/team")
    row = index.entry_of(record)
    assert index.record_of(row).summary() == record.summary() == index.record_summary(row)
    assert index.record_of(row).to_run_info() == record.to_run_info()


def test_two_compactors_at_once_lose_nothing_and_list_each_run_once(root: str) -> None:
    """Both read the same index, each folds what it listed and writes the same sequence under its own name (no
    conditional write decides between them), then both delete: the next reader folds both objects."""
    objects = index_objects(root)
    for i in range(4):
        write_entry(root, None, run(i), now=T0 + dt.timedelta(seconds=i))
    compact(objects, read_index(objects))
    write_entry(root, None, run(4), now=T0 + dt.timedelta(minutes=1))
    first = read_index(objects)  # sees r004's entry
    write_entry(root, None, run(5), now=T0 + dt.timedelta(minutes=2))  # after the first listed, before the second
    write_entry(root, None, run(1, "SUCCEEDED"), now=T0 + dt.timedelta(minutes=3))
    second = read_index(objects)
    a, b = compact(objects, first), compact(objects, second)
    assert a != b and index.index_seq(a) == index.index_seq(b)
    snapshot = read_index(objects)
    listed = ids(list(snapshot.runs()))
    assert sorted(listed) == ["r000", "r001", "r002", "r003", "r004", "r005"]
    assert [r["status"] for r in snapshot.runs() if r["id"] == "r001"] == ["SUCCEEDED"]
    compact(objects, snapshot)
    names = [item.rel for item in objects.list("rtjob-index")]
    assert len(names) == 1 and names[0].startswith(INDEX_OBJECTS_DIR)
    assert sorted(ids(list(read_index(objects).runs()))) == sorted(listed)


def test_a_reader_that_loses_a_listed_object_to_a_compactor_reads_again(root: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    objects = index_objects(root)
    for i in range(3):
        write_entry(root, None, run(i), now=T0 + dt.timedelta(seconds=i))
    real_list = objects.list
    raced = []

    def listing_then_compaction(prefix: str = "") -> list[index.Listed]:  # type: ignore[name-defined]
        found = real_list(prefix)
        if prefix == INDEX_OBJECTS_DIR and not raced:  # between this reader's listings and its GETs
            raced.append(True)
            monkeypatch.setattr(objects, "list", real_list)
            compact(objects, read_index(objects))
        return found

    monkeypatch.setattr(objects, "list", listing_then_compaction)
    snapshot = read_index(objects)
    assert raced and sorted(ids(list(snapshot.runs()))) == ["r000", "r001", "r002"]


def test_bad_objects_are_lines_and_a_newer_index_is_refused(root: str) -> None:
    from rtjob.core.errors import BadInput

    objects = index_objects(root)
    write_entry(root, None, run(1))
    objects.put(f"{INDEX_ENTRIES_DIR}/20261120T100000000000Z-rx-0123456789ab.json", b"{not json")
    snapshot = read_index(objects)
    assert ids(list(snapshot.runs())) == ["r001"] and "not an rtjob index entry" in snapshot.problems[0]
    compact(objects, snapshot)  # the unreadable entry is not held, so not deleted
    assert any("rx-0123456789ab" in item.rel for item in objects.list(INDEX_ENTRIES_DIR))
    objects.put(f"{INDEX_OBJECTS_DIR}/999999999999-ffffffffffff.jsonl", b'{"schema":99,"seq":1,"runs":0}\n')
    with pytest.raises(BadInput, match="newer than this rtjob reads"):
        read_index(objects)


def test_root_of_a_run_folder() -> None:
    assert index.root_of("s3://bk/team/runs/train/r1", "r1") == "s3://bk/team/runs"
    assert index.root_of("s3://bk/train/r1", "r1") == "s3://bk"
    assert index.root_of("s3://bk/train/other", "r1") is None
    assert index.root_of("/srv/runs/train/r1", "r1") == "/srv/runs"


def test_runs_storage_lists_from_the_index_and_reindex_adds_records_of_an_older_rtjob(root: str,
                                                                                      tmp_path: Path) -> None:
    from support.cli import base_env, run_in_process

    env = {**base_env(tmp_path / "home"), **({k: os.environ[k] for k in os.environ if k.startswith("AWS_")})}
    for i in range(3):  # as runs/memory.py writes them: the record, then its entry
        record = run(i, "SUCCEEDED", job="train" if i else "eval", user="bob" if i == 2 else "alice", root=root)
        plant_record(record.storage_uri or "", record, None)
        write_run_entry(record.storage_uri or "", None, record)
    older = run(7, "FAILED", root=root)  # an older rtjob's run: a record, no entry
    plant_record(older.storage_uri or "", older, None)

    def listed(*args: str) -> list[dict[str, object]]:
        proc = run_in_process("runs", "--storage", root, "-o", "json", *args, env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    rows = listed()
    assert ids(rows) == ["r002", "r001", "r000"]
    said = rows[0].pop("verdict")  # the row's verdict (core/verdict.of_entry), as `status` says it
    assert rows[0] == run(2, "SUCCEEDED", user="bob", root=root).summary() | {"updated_at": None}
    assert (said["status"], said["reason"], said["attempts"]) == ("SUCCEEDED", "completed", 1), said
    assert ids(listed("--user", "bob")) == ["r002"]
    assert ids(listed("--job", "eval")) == ["r000"]
    assert ids(listed("--status", "failed")) == []
    assert ids(listed("--reindex")) == ["r007", "r002", "r001", "r000"]  # the older run, from its record
    assert ids(listed("--status", "failed")) == ["r007"]
    shown = run_in_process("show", "r001", "-o", "json", env=env)  # remembered in this ledger, whole
    assert shown.returncode == 0 and json.loads(shown.stdout)["spec"] == {"document": {"name": "train"}}
    refused = run_in_process("runs", "--user", "bob", env=env)
    assert refused.returncode == 2 and "only with --storage" in refused.stderr


def test_one_run_filter_from_flags_and_from_the_pages_query_string() -> None:
    """`rtjob list`/`runs` flags and the UI's query string parse to the same model, through the one (capped)
    duration parser, and one rule keeps a row, a RunInfo, and an index row alike."""
    flags = RunFilter.from_flags(status="failed", job="train", since="2h", limit=None, user="bob", now=T0)
    page = RunFilter.from_params({"status": "FAILED ", "job": "train", "since": "2h", "user": "bob", "q": ""}, now=T0)
    assert flags == page == RunFilter(job="train", status=RunStatus.FAILED, user="bob",
                                      since=T0 - dt.timedelta(hours=2))
    row = {"id": "r1", "job": "train", "status": "FAILED", "user": "bob",
           "start_time": (T0 - dt.timedelta(hours=1)).isoformat()}
    assert flags.keeps(row) and not flags.keeps({**row, "status": "SUCCEEDED"})
    assert not flags.keeps({**row, "start_time": (T0 - dt.timedelta(hours=3)).isoformat()})
    assert flags.keeps({**row, "start_time": None})  # not started yet: kept
    assert not flags.keeps({**row, "start_time": None, "submitted_at": "2026-11-19T00:00:00"})  # naive: UTC
    listed = [RunInfo(id=f"r{n}", job="train", backend="local", status=RunStatus.FAILED,
                      start_time=(T0 - dt.timedelta(minutes=n)).isoformat()) for n in range(5)]
    assert [r.id for r in RunFilter.from_flags(status="FAILED", limit=2).apply(listed)] == ["r0", "r1"]
    assert RunFilter(text="TAG=v").keeps({"id": "x", "tags": {"tag": "v"}})
    assert RunFilter.from_params({"q": " R1 "}).keeps(row)
    for bad in ({"since": "soon"}, {"since": "1000000d"}, {"since": "9" * 400}, {"status": "bogus"}):
        with pytest.raises(BadInput):
            RunFilter.from_params(bad)
    with pytest.raises(BadInput, match="--since 'soon'"):
        RunFilter.from_flags(since="soon")
    assert RunFilter(user="bob", backend="local").ledger_query() == {"job": None, "status": None,
                                                                     "backend": "local", "since": None}
