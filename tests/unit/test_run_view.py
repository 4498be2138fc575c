"""runs/view.py: a retried run is one story in every command (one row, the latest attempt's status and message,
the first attempt's start, one duration)."""

from __future__ import annotations

from rtjob.core.model import RunInfo, RunStatus
from rtjob.core.record import RunRecord
from rtjob.runs.listed import fold_retries
from rtjob.runs.view import recorded_story, recorded_times


def info(run_id: str, status: RunStatus, start: str, end: str | None, parent: str | None = None,
         message: str | None = None) -> RunInfo:
    return RunInfo(id=run_id, job="j", backend="local", status=status, start_time=start, end_time=end,
                   parent=parent, message=message, exit_code=0 if status == RunStatus.SUCCEEDED else 137)


def test_a_retried_run_is_one_row_with_its_latest_attempts_status() -> None:
    listed = [info("r1-retry2", RunStatus.SUCCEEDED, "t3", "t4", parent="r1", message="done"),
              info("other", RunStatus.FAILED, "t2", "t2"),
              info("r1-retry1", RunStatus.FAILED, "t2", "t3", parent="r1", message="killed again"),
              info("r1", RunStatus.FAILED, "t1", "t2", message="killed")]
    rows = fold_retries(listed)
    assert [r.id for r in rows] == ["other", "r1"]
    one = rows[1]
    assert (one.status, one.message, one.exit_code, one.attempts) == (RunStatus.SUCCEEDED, "done", 0, 3)
    assert (one.start_time, one.end_time, one.parent) == ("t1", "t4", None)


def test_a_retry_whose_first_attempt_is_gone_stays_a_row() -> None:
    rows = fold_retries([info("r1-retry1", RunStatus.RUNNING, "t2", None, parent="r1")])
    assert [(r.id, r.attempts) for r in rows] == [("r1-retry1", 1)]


def test_a_record_whose_last_attempt_ended_otherwise_tells_that_end() -> None:
    record = RunRecord(id="r1", job="j", backend="local", status="FAILED", message="killed",
                       attempts=[{"id": "r1", "status": "FAILED", "exit_code": 137},
                                 {"id": "r1-retry1", "status": "SUCCEEDED", "exit_code": 0}])
    told = recorded_story(record.to_run_info(), record)
    assert (told.status, told.exit_code, told.attempts) == (RunStatus.SUCCEEDED, 0, 2)
    assert told.message == "attempt 2 (r1-retry1) ended SUCCEEDED"
    record.status = "SUCCEEDED"
    assert recorded_story(record.to_run_info(), record).message == "killed"  # the record's own, where they agree


def test_an_ended_runs_times_are_its_records() -> None:
    record = RunRecord(id="r1", job="j", backend="local", status="SUCCEEDED", start_time="t1", end_time="t4.5",
                       archived=True)
    ended = info("r1", RunStatus.SUCCEEDED, "t1", "t5")
    assert (recorded_times(ended, record).start_time, recorded_times(ended, record).end_time) == ("t1", "t4.5")
    running = info("r1", RunStatus.RUNNING, "t1", None)
    assert recorded_times(running, record) is running
    record.archived = False
    assert recorded_times(ended, record) is ended
