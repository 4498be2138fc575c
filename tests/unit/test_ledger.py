"""The local run ledger (rtjob.ledger): upsert/get/update, listing order and filters, pruning, the schema and
its migrations, files it must refuse without touching them, and several real processes writing at once."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rtjob.core.errors import BadInput
from rtjob.core.index_entry import VERDICT_INPUTS, ledger_summary, summary_said
from rtjob.core.record import RunRecord
from rtjob.core.verdict import of_record
from rtjob.ledger import Ledger, ledger_path
from rtjob.ledger import ledger as ledger_module

UTC = dt.timezone.utc


def record(run_id: str, start: str | None = None, **fields: object) -> RunRecord:
    fields.setdefault("job", "ddp-resnet")
    fields.setdefault("backend", "ray")
    return RunRecord(id=run_id, start_time=start, **fields)  # type: ignore[arg-type]


def ids(records: list[RunRecord]) -> list[str]:
    return [r.id for r in records]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "home" / "ledger.sqlite3")


def test_path_follows_rtjob_home_and_nothing_is_created_until_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    assert ledger_path() == tmp_path / "home" / "ledger.sqlite3"
    fresh = Ledger.default()
    assert fresh.path == ledger_path()
    assert (fresh.get("x"), fresh.query(), fresh.summaries(), fresh.unarchived(), fresh.count()) == (
        None, [], [], [], 0)
    assert fresh.update("x", lambda r: True) is None and fresh.prune(keep=0) == 0
    assert not (tmp_path / "home").exists()  # reading a ledger that is not there creates nothing
    fresh.save(record("r1"))
    assert ledger_path().is_file() and ledger_path().stat().st_mode & 0o077 == 0  # private to its user


def test_save_is_an_upsert_of_the_whole_record_and_get_reads_it_back(ledger: Ledger) -> None:
    first = record("r1", "2026-11-20T10:00:00+00:00", git={"commit": "abc", "dirty": True, "branch": "main"},
                   request={"entrypoint": "python train.py"}, attempts=[{"id": "r1", "status": "RUNNING"}])
    ledger.save(first)
    assert first.updated_at is not None
    assert ledger.get("r1") == first and ledger.get("nope") is None
    first.status, first.exit_code, first.message = "FAILED", 3, "boom"
    ledger.save(first)
    assert ledger.get("r1") == first and ledger.count() == 1


def test_update_writes_only_when_the_change_says_so(ledger: Ledger) -> None:
    ledger.save(record("r1", status="RUNNING"))
    before = ledger.get("r1")
    assert before is not None

    def finish(r: RunRecord) -> bool:
        r.status, r.archived = "SUCCEEDED", True
        return True

    done = ledger.update("r1", finish)
    assert done is not None and done.status == "SUCCEEDED" and ledger.get("r1") == done
    assert ledger.unarchived() == []

    def look_only(r: RunRecord) -> bool:
        r.message = "not kept"
        return False

    assert ledger.update("r1", look_only) is not None
    assert ledger.get("r1") == done  # nothing written
    assert ledger.update("absent", finish) is None and ledger.count() == 1

    def fail(r: RunRecord) -> bool:
        r.status = "STOPPED"
        raise RuntimeError("change failed")

    with pytest.raises(RuntimeError):
        ledger.update("r1", fail)
    assert ledger.get("r1") == done  # rolled back, and the ledger is usable after it
    ledger.save(record("r2"))
    assert ledger.count() == 2


def test_query_is_newest_first_with_filters_limit_and_since(ledger: Ledger) -> None:
    # Start times in the forms backends report (offset, Z, no zone, fractions); submitted_at when not started.
    ledger.save(record("old", "2026-11-01T09:00:00+00:00", status="SUCCEEDED"))
    ledger.save(record("east", "2026-11-02T01:00:00+09:00", status="FAILED", backend="anyscale"))  # = 11-01 16:00Z
    ledger.save(record("zulu", "2026-11-03T08:00:00.250Z", job="other", status="SUCCEEDED"))
    ledger.save(record("naive", "2026-11-04T08:00:00", status="RUNNING"))
    ledger.save(record("queued", None, submitted_at="2026-11-05T08:00:00+00:00", status="PENDING"))
    ledger.save(record("seen", None, status="RUNNING"))  # no time at all: sorts by when it was first seen (now)
    assert ids(ledger.query()) == ["seen", "queued", "naive", "zulu", "east", "old"]
    assert ids(ledger.query(limit=2)) == ["seen", "queued"]
    assert len(ledger.query(limit=None)) == 6 and ledger.query(limit=0) == []
    assert ids(ledger.query(job="other")) == ["zulu"]
    assert ids(ledger.query(status="succeeded")) == ["zulu", "old"]
    assert ids(ledger.query(backend="anyscale")) == ["east"]
    assert ids(ledger.query(since=dt.datetime(2026, 11, 3, 8, 0, 0, 250000, tzinfo=UTC))) == [
        "seen", "queued", "naive", "zulu"]
    assert ids(ledger.query(since=dt.datetime(2026, 11, 1, 12, tzinfo=UTC), status="FAILED",
                            backend="anyscale")) == ["east"]
    assert ids(ledger.query(job="ddp-resnet", status="RUNNING", limit=1)) == ["seen"]
    # Saved again without a time, an entry keeps its place; once it starts, it moves to its start time.
    ledger.save(record("seen", None, status="RUNNING", message="still there"))
    assert ids(ledger.query(limit=1)) == ["seen"]
    ledger.save(record("seen", "2026-10-01T00:00:00+00:00", status="RUNNING"))
    assert ids(ledger.query())[-1] == "seen"


def test_summaries_are_the_records_short_form_in_the_same_order(ledger: Ledger) -> None:
    ledger.save(record("a", "2026-11-01T09:00:00+00:00", status="SUCCEEDED", exit_code=0, end_time="2026-11-01T10:00:00+00:00",
                       git={"commit": "c0ffee", "dirty": False}, cost={"estimated_usd": 1.5, "text": "est. $1.50"},
                       storage_uri="s3://b/runs/ddp-resnet/a", address="https://ray:8265", archived=True))
    ledger.save(record("b", "2026-11-02T09:00:00+00:00", status="RUNNING", backend="anyscale"))
    summaries = ledger.summaries(limit=None)
    assert summaries == [ledger_summary(r) for r in ledger.query(limit=None)]
    assert list(summaries[0]) == ["id", "job", "backend", "status", "message", "start_time", "end_time",
                                  "storage_uri", "exit_code", "address", "submitted_at", "updated_at", "archived",
                                  "git_commit", "git_dirty", "cost_usd", *VERDICT_INPUTS]  # b: RUNNING, no verdict
    assert summaries[1] | {"updated_at": None} == {
        "id": "a", "job": "ddp-resnet", "backend": "ray", "status": "SUCCEEDED", "message": None,
        "start_time": "2026-11-01T09:00:00+00:00", "end_time": "2026-11-01T10:00:00+00:00",
        "storage_uri": "s3://b/runs/ddp-resnet/a", "exit_code": 0, "address": "https://ray:8265",
        "submitted_at": None, "updated_at": None, "archived": True, "git_commit": "c0ffee", "git_dirty": False,
        "cost_usd": 1.5, "attempts": 1, "carried_by": None, "last_seen": None, "completed_by": None,
        "reason": "completed", "outputs": None, "queue": None, "verdict": of_record(ledger.get("a")).to_json()}
    assert "verdict" not in summaries[0]  # a run not ended: its verdict depends on the reader's clock
    # `rtjob runs -o json` prints RunRecord.summary()'s keys and the verdict `status`/`show` print
    now = dt.datetime(2026, 11, 3, tzinfo=dt.timezone.utc)  # one clock for both readers (b's duration runs on)
    for said, run in ((summary_said(summaries[0], now), "b"), (summary_said(summaries[1], now), "a")):
        assert list(said) == [*RunRecord(id="-", job=None, backend="-").summary(), "verdict"]
        assert said["verdict"] == of_record(ledger.get(run), now).to_json()
    assert [s["id"] for s in ledger.summaries(backend="anyscale")] == ["b"]


def test_unarchived_lists_runs_whose_end_is_still_to_be_saved(ledger: Ledger) -> None:
    ledger.save(record("done", "2026-11-01T00:00:00+00:00", status="SUCCEEDED", archived=True))
    ledger.save(record("ray-open", "2026-11-02T00:00:00+00:00", status="RUNNING"))
    ledger.save(record("any-open", "2026-11-03T00:00:00+00:00", status="PENDING", backend="anyscale"))
    assert ids(ledger.unarchived()) == ["any-open", "ray-open"]
    assert ids(ledger.unarchived("ray")) == ["ray-open"]


def test_prune_forgets_only_entries_of_ended_runs(ledger: Ledger) -> None:
    for day, status in enumerate(["SUCCEEDED", "FAILED", "RUNNING", "STOPPED", "PENDING", "SUCCEEDED"], start=1):
        ledger.save(record(f"d{day}", f"2026-11-0{day}T00:00:00+00:00", status=status))
    with pytest.raises(ValueError):
        ledger.prune()
    assert ledger.prune(older_than=dt.datetime(2026, 11, 2, tzinfo=UTC)) == 1  # d1
    assert ledger.prune(keep=2) == 2  # d2 (FAILED), d4 (STOPPED); d3 RUNNING stays, d5 d6 are the newest two
    assert ids(ledger.query()) == ["d6", "d5", "d3"]
    ledger.save(record("d7", "2026-11-07T00:00:00+00:00", status="SUCCEEDED"))
    assert ledger.prune(older_than=dt.datetime(2026, 11, 7, tzinfo=UTC), keep=1) == 1  # d6: old and not kept
    assert ledger.prune(keep=0) == 1 and ids(ledger.query()) == ["d5", "d3"]  # d7; never PENDING/RUNNING


def test_an_unreadable_entry_is_skipped_with_one_warning_line(tmp_path: Path) -> None:
    lines: list[str] = []
    ledger = Ledger(tmp_path / "ledger.sqlite3", warn=lines.append)
    for n in range(3):
        ledger.save(record(f"r{n}", f"2026-11-0{n + 1}T00:00:00+00:00"))
    with sqlite3.connect(tmp_path / "ledger.sqlite3") as db:  # a hand edit
        db.execute("UPDATE runs SET record = '{not json' WHERE id = 'r1'")
        db.execute("UPDATE runs SET record = ? WHERE id = 'r2'", ('{"id": "r2", "backend": "ray", "schema": 99}',))
    assert ids(ledger.query()) == ["r0"]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert str(tmp_path / "ledger.sqlite3") in lines[0] and "skipped 2 unreadable entries (r2, r1)" in lines[0]
    assert ids(ledger.unarchived()) == ["r0"] and len(lines) == 2 and ledger.warnings == lines
    with pytest.raises(BadInput, match="run r1: not valid JSON"):
        ledger.get("r1")
    with pytest.raises(BadInput, match="schema 99"):
        ledger.update("r2", lambda r: True)
    ledger.save(record("r1"))  # saving the run again replaces the bad entry
    assert ledger.get("r1") is not None


def test_an_empty_file_is_migrated_and_reopening_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.touch()  # schema 0: an empty SQLite database
    with Ledger(path) as first:
        first.save(record("r1"))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == ledger_module.SCHEMA_VERSION == 1
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = db.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    for _ in range(2):
        with Ledger(path) as again:
            assert ids(again.query()) == ["r1"]
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall() == tables


def test_a_new_schema_version_is_one_more_migration_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as v1:  # a ledger made by this rtjob ...
        v1.save(record("kept", "2026-11-01T00:00:00+00:00"))
    # ... opened by one whose layout has a second step: it is migrated in place, its entries kept.
    v2_step = ("ALTER TABLE runs ADD COLUMN note TEXT", "UPDATE runs SET note = 'migrated'")
    monkeypatch.setattr(ledger_module, "MIGRATIONS", [*ledger_module.MIGRATIONS, v2_step])
    monkeypatch.setattr(ledger_module, "SCHEMA_VERSION", 2)
    with Ledger(path) as v2:
        assert ids(v2.query()) == ["kept"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
        assert db.execute("SELECT note FROM runs").fetchall() == [("migrated",)]


def refused(path: Path, *match: str) -> str:
    """Every way in refuses ``path`` with one line containing ``match``, and leaves its bytes as they were."""
    before = path.read_bytes()
    ledger = Ledger(path)
    for use in (ledger.count, ledger.query, lambda: ledger.save(record("new")), lambda: ledger.get("x")):
        with pytest.raises(BadInput) as caught:
            use()
        message = caught.value.message
        assert "\n" not in message and str(path) in message and all(m in message for m in match), message
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no -wal/-shm left beside it
    return message


@pytest.mark.parametrize("content", [b"these are my notes, not a database\n" * 40, bytes(range(256)) * 16,
                                     b"SQLite format 3\x00" + b"\xff" * 4080], ids=["text", "binary", "bad-header"])
def test_a_file_that_is_not_a_ledger_is_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(content)
    message = refused(path, "is not a readable rtjob ledger", "move it aside", "never overwrites")
    assert message.endswith("or set RTJOB_HOME to use another ledger")


def test_an_sqlite_database_of_something_else_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    db.close()
    refused(path, "not a readable rtjob ledger (an SQLite database of something else)")


def test_a_ledger_damaged_inside_is_one_line_when_read_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as intact:
        intact.save_many(record(f"r{n:03d}", message="x" * 500) for n in range(300))
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16384] = b"\xa5" * 16384  # a few pages of the table overwritten
    path.write_bytes(bytes(data))
    with Ledger(path) as damaged, pytest.raises(BadInput) as caught:
        damaged.query(limit=None)
    message = caught.value.message
    assert "\n" not in message and message.startswith(f"{path} is not a readable rtjob ledger (")
    assert path.read_bytes() == data


def test_a_ledger_from_a_newer_rtjob_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as current:
        current.save(record("r1"))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 7")
        db.execute("PRAGMA journal_mode = DELETE")  # folds the -wal file in, so the folder holds one file
    db.close()
    refused(path, "is from a newer rtjob (ledger schema 7, this one reads up to 1)", "upgrade rtjob",
            "set RTJOB_HOME to use another ledger")


def test_a_folder_that_cannot_be_written_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "home"
    blocker.write_text("a file where RTJOB_HOME's folder should be")  # fails for root too, unlike chmod
    ledger = Ledger(blocker / "ledger.sqlite3")
    assert ledger.query() == []  # nothing to read is not an error
    with pytest.raises(BadInput) as caught:
        ledger.save(record("r1"))
    message = caught.value.message
    assert "\n" not in message and message.startswith(f"cannot open the run ledger {blocker / 'ledger.sqlite3'} (")
    assert message.endswith(f"make {blocker} writable, or set RTJOB_HOME to a writable folder")


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from rtjob.core.record import RunRecord
    from rtjob.ledger import Ledger

    shared_path, fresh_path, name, count, procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    ready = Path(shared_path).parent / f"ready-{name}"
    ready.touch()
    deadline = time.monotonic() + 120
    while len(list(ready.parent.glob("ready-*"))) < procs:  # start together, so the writes really overlap
        assert time.monotonic() < deadline, "the other writers never started"
        time.sleep(0.005)

    def bump(record):
        record.metrics = {"count": (record.metrics or {}).get("count", 0) + 1,
                          "by": [*(record.metrics or {}).get("by", []), name]}
        return True

    Ledger(fresh_path).save(RunRecord(id=name, job="j", backend="ray"))  # create + migrate a new file at once
    ledger = Ledger(shared_path)
    for i in range(count):
        ledger.save(RunRecord(id=f"{name}-{i}", job="j", backend="ray", start_time=f"2026-11-01T00:00:{i % 60:02d}Z"))
        ledger.update("shared", bump)
""")


def test_several_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    procs, count = 4, 150
    shared, fresh = tmp_path / "shared" / "ledger.sqlite3", tmp_path / "fresh" / "ledger.sqlite3"
    Ledger(shared).save(record("shared", metrics={"count": 0, "by": []}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(shared), str(fresh), f"w{n}", str(count),
                                 str(procs)], env=env, stderr=subprocess.PIPE, text=True) for n in range(procs)]
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err
    ledger = Ledger(shared)
    assert ledger.count() == procs * count + 1
    assert {r.id for r in ledger.query(limit=None)} == {"shared"} | {
        f"w{n}-{i}" for n in range(procs) for i in range(count)}
    result = ledger.get("shared")
    assert result is not None and result.metrics is not None
    assert result.metrics["count"] == procs * count  # no read-modify-write lost
    assert sorted(result.metrics["by"]) == sorted(f"w{n}" for n in range(procs) for _ in range(count))
    assert sorted(ids(Ledger(fresh).query())) == [f"w{n}" for n in range(procs)]


def test_ten_thousand_entries_list_in_full(ledger: Ledger) -> None:
    # The size `rtjob runs -o json --limit 10000` reads (its time is measured in benchmarks/ledger_bench.py).
    start = dt.datetime(2026, 1, 1, tzinfo=UTC)
    assert ledger.save_many(record(f"r{n:05d}", (start + dt.timedelta(minutes=n)).isoformat(),
                                   status="SUCCEEDED" if n % 3 else "FAILED") for n in range(10_000)) == 10_000
    summaries = ledger.summaries(limit=10_000)
    assert len(summaries) == 10_000 and summaries[0]["id"] == "r09999" and summaries[-1]["id"] == "r00000"
    assert len(ledger.query(status="FAILED", limit=None)) == 3334
