"""The run ledger through the CLI, offline (in-process, a private RTJOB_HOME): a ledger that is not one, or is from a
newer rtjob, is one line and exit 2 and is never written; a submit still goes on with a warning; `runs` filters and
`--prune` forgets only ended runs (never storage)."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path

import pytest
from rtjob.core.record import RunRecord
from rtjob.ledger import Ledger
from support.cli import in_process
from support.scrub import scrub


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path))
    scrub(monkeypatch)
    return tmp_path


def _record(run_id: str, status: str, days_ago: float, backend: str = "ray", job: str = "a") -> RunRecord:
    when = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_ago)).isoformat(timespec="seconds")
    return RunRecord(id=run_id, job=job, backend=backend, status=status, start_time=when, submitted_at=when,
                     archived=status in ("SUCCEEDED", "FAILED", "STOPPED"))


@pytest.mark.parametrize("damage", ["not a database", "newer schema"])
def test_a_broken_ledger_is_one_line_exit_2_and_left_as_it_was(home: Path, capsys: pytest.CaptureFixture[str],
                                                              damage: str) -> None:
    path = home / "ledger.sqlite3"
    if damage == "not a database":
        path.write_bytes(b"this is a text file, not SQLite\n" * 10)
    else:
        with Ledger(path) as book:
            book.save(_record("r1", "SUCCEEDED", 1))
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA user_version = 9")
            db.execute("PRAGMA journal_mode = DELETE")
        db.close()
    before = path.read_bytes()
    res = in_process(capsys, "runs")
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and str(path) in res.stderr and "Traceback" not in res.stderr
    assert ("newer rtjob" in res.stderr) == (damage == "newer schema")
    assert path.read_bytes() == before
    assert sorted(p.name for p in home.iterdir()) == ["ledger.sqlite3"]


def test_runs_filters_and_prune_forgets_only_old_ended_runs(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Ledger(home / "ledger.sqlite3") as book:
        for record in (_record("old-done", "SUCCEEDED", 40), _record("old-running", "RUNNING", 40),
                       _record("new-failed", "FAILED", 1, backend="anyscale", job="b"),
                       _record("new-done", "SUCCEEDED", 0.5)):
            book.save(record)
    listed = json.loads(in_process(capsys, "runs", "-o", "json", "--backend", "ray").stdout)
    assert [r["id"] for r in listed] == ["new-done", "old-running", "old-done"]
    assert [r["id"] for r in json.loads(in_process(capsys, "runs", "-o", "json", "--status", "failed").stdout)] == \
        ["new-failed"]
    assert [r["id"] for r in json.loads(in_process(capsys, "runs", "-o", "json", "--since", "2d").stdout)] == \
        ["new-done", "new-failed"]
    text = in_process(capsys, "runs", "--job", "b")
    assert text.returncode == 0 and "new-failed" in text.stdout and "new-done" not in text.stdout
    pruned = in_process(capsys, "runs", "--prune", "--older-than", "30d")
    assert pruned.returncode == 0 and "forgot 1 ended run(s)" in pruned.stderr
    left = [r["id"] for r in json.loads(in_process(capsys, "runs", "-o", "json").stdout)]
    assert left == ["new-done", "new-failed", "old-running"]  # a run whose end was never seen is kept


def test_show_and_status_of_a_recorded_run_list_its_attempts_as_the_live_status_does(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = _record("r1", "SUCCEEDED", 1, backend="local")
    record.attempts = [
        {"id": "r1", "attempt": 1, "status": "FAILED", "exit_code": 137,
         "retry_reason": "its driver was killed by SIGKILL (exit code 137)"},
        {"id": "r1-retry1", "attempt": 2, "status": "SUCCEEDED", "exit_code": 0, "retry_reason": None},
    ]
    with Ledger(home / "ledger.sqlite3") as book:
        book.save(record)
    line = "attempts:    2: r1 FAILED (its driver was killed by SIGKILL (exit code 137)) -> r1-retry1 SUCCEEDED"
    for command in ("show", "status"):
        res = in_process(capsys, command, "r1", "--backend", "local")
        assert res.returncode == 0, res.stderr
        assert line in res.stdout.splitlines(), res.stdout


def test_show_prints_metric_values_and_checkpoint_sizes_not_reprs() -> None:
    from rtjob.commands.history import _show_text
    from rtjob.core.record import RunRecord

    record = RunRecord(id="r1", job="j", backend="local", status="SUCCEEDED", train_storage=["/tmp/mine/exp"],
                       metrics={"accuracy": None, "val_loss": 0.123456789, "epoch": 3.0, "samples_per_s": 41234.56,
                                "best_epoch": 2, "last": {"epoch": 3}})
    text = _show_text(record, [{"name": "checkpoint_000002", "files": 3, "bytes": 812},
                               {"name": "checkpoint_000003", "files": 3, "bytes": 12_400_000}])
    metrics = next(line for line in text.splitlines() if line.startswith("metrics:"))
    assert metrics == "metrics:     val_loss=0.1235, epoch=3, samples_per_s=41235, best_epoch=2"  # no empty ones
    assert "checkpoint_000002  3 files, 812 B" in text and "checkpoint_000003  3 files, 12.4 MB" in text
    assert "train runs:  /tmp/mine/exp" in text


def test_show_is_a_summary_with_the_request_behind_a_flag(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`show`: the job's own command (not the companion that wraps it), what the script's RTJOB_RUN_DIR is beside its
    storage, times in one format, about 15 lines; the request with --request and in -o json."""
    record = _record("r9", "SUCCEEDED", 1, backend="local")
    record.storage_uri = "s3://bucket/runs/j/r9"
    record.submitted_at = "2026-11-27T10:06:08.123456+00:00"
    record.start_time, record.end_time = "2026-11-27T10:06:09+00:00", "2026-11-27T10:07:10.5+00:00"
    record.request = {"backend": "ray", "submit_job": {
        "entrypoint": "python -m rtjob.runside.companion 'python train.py --epochs 2'",
        "runtime_env": {"env_vars": {f"RTJOB_VAR_{n}": str(n) for n in range(20)}}}}
    with Ledger(home / "ledger.sqlite3") as book:
        book.save(record)
    text = in_process(capsys, "show", "r9", "--backend", "local")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) <= 18 and '"submit_job"' not in text.stdout, text.stdout
    assert "command:     python train.py --epochs 2" in lines
    assert "run dir:     $TMPDIR/rtjob-run-dirs-<uid>/r9/run on the driver's node (RTJOB_RUN_DIR), synced to the " \
           "storage (RTJOB_RUN_URI)" in lines
    assert "started:     2026-11-27T10:06:09Z" in lines and "ended:       2026-11-27T10:07:10Z" in lines
    assert any(line.startswith("submitted:   2026-11-27T10:06:08Z") for line in lines), lines
    assert "request:     rtjob show r9 --request (or -o json)" in lines
    full = in_process(capsys, "show", "r9", "--backend", "local", "--request")
    assert full.returncode == 0 and '"submit_job"' in full.stdout and "RTJOB_VAR_19" in full.stdout
    assert json.loads(in_process(capsys, "show", "r9", "--backend", "local", "-o", "json").stdout)["request"] == \
        record.request


@pytest.mark.parametrize("recorded", ["2026-11-27T10:06:08.123+00:00", "2026-11-27T10:06:08+00:00",
                                      "2026-11-27T10:06:08.999999Z", "2026-11-27T10:06:08", "2026-11-27T11:06:08+01:00"])
def test_every_printed_time_has_one_format(recorded: str) -> None:
    """Whatever precision or zone a time was recorded in (the companion's milliseconds, Ray's seconds), commands
    print it one way: UTC to the second, with a Z."""
    from rtjob.core.model import stamp

    assert stamp(recorded) == "2026-11-27T10:06:08Z"
    assert stamp(None) == "-" and stamp("soon") == "soon"
