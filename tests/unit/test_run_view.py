"""runs/view.py: a retried run is one story in every command (one row, the latest attempt's status and message,
the first attempt's start, one duration)."""

from __future__ import annotations

from rtjob.core.model import RunInfo, RunStatus
from rtjob.core.record import RunRecord
from rtjob.runs.listed import fold_retries
from rtjob.runs.view import recorded_story


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
    """What a carrying look (status --repair, stop, wait) and a follow's end say of an ended run: the verdict of
    its archived record over the backend's answer, its start and end the record's (milliseconds kept)."""
    from rtjob.core.verdict import verdict

    record = RunRecord(id="r1", job="j", backend="local", status="SUCCEEDED", archived=True,
                       start_time="2026-11-25T10:00:00.250+00:00", end_time="2026-11-25T10:04:30.500+00:00")
    ended = info("r1", RunStatus.SUCCEEDED, "2026-11-25T10:00:01+00:00", "2026-11-25T10:05:00+00:00")
    seen = verdict(record, None, ended).onto(ended)
    assert (seen.start_time, seen.end_time) == (record.start_time, record.end_time)
    running = info("r1", RunStatus.RUNNING, "2026-11-25T10:00:01+00:00", None)
    assert verdict(None, None, running).onto(running).status == RunStatus.RUNNING
