"""The one verdict (core/verdict.py): a table of runs as the kernel knows them (plain, retried, a pipeline, a
companion lost, a cluster gone, storage down then back, outputs not stored), each with the status, reason, line,
attempts and duration every view shows; and every view's way in (a record: `status`/`show`/the UI's page; an index
entry: `runs --storage`/the UI's list; a live answer: `status`/`list` while the cluster knows the run) gives the
same answer from the same function."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest
from rtjob.core.index_entry import entry_of, seen_row
from rtjob.core.model import RunInfo, RunStatus
from rtjob.core.record import RunRecord
from rtjob.core.verdict import AGREED, Carrier, EndReason, of_entry, of_record, said, verdict
from rtjob.runs.memory import remembered_info

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.timezone.utc)
START = "2026-12-02T11:00:00.250+00:00"
END = "2026-12-02T11:00:48.750+00:00"  # 48.5 s after START: milliseconds kept


def at(seconds_before_now: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_before_now)).isoformat(timespec="milliseconds")


def attempt(n: int, status: str, reason: str | None = None) -> dict[str, Any]:
    return {"id": "r1" if n == 1 else f"r1-retry{n - 1}", "attempt": n, "status": status, "exit_code": None,
            "retry_reason": reason}


def record(**fields: Any) -> RunRecord:
    base: dict[str, Any] = {"id": "r1", "job": "train", "backend": "local", "submitted_at": START,
                            "start_time": START, "storage_uri": "/tmp/store/train/r1"}
    return RunRecord(**{**base, **fields})


@dataclass
class Case:
    name: str
    stored: RunRecord | None
    status: RunStatus
    reason: EndReason
    line: str | None
    attempts: int
    duration_s: float | None
    row: RunRecord | None = None
    live: RunInfo | None = None
    cluster_forgot: bool = False
    outputs_complete: bool | None = None
    carried_by: Carrier = Carrier.COMPANION
    extra: dict[str, Any] = field(default_factory=dict)


LOST = "its driver was lost (node died)"
CASES = [
    Case("plain", record(status="SUCCEEDED", end_time=END, completed_by="companion", carried_by="companion",
                         message="\n  done: 3 epochs\nmore text", outputs={"complete": True}),
         RunStatus.SUCCEEDED, EndReason.COMPLETED, "done: 3 epochs", 1, 48.5, outputs_complete=True),
    Case("failed", record(status="FAILED", end_time=END, completed_by="companion", carried_by="companion",
                          exit_code=1, message="ValueError: bad lr\nTraceback ..."),
         RunStatus.FAILED, EndReason.SCRIPT_FAILED, "ValueError: bad lr", 1, 48.5),
    Case("retried", record(status="SUCCEEDED", end_time=END, completed_by="supervisor", carried_by="supervisor",
                           message="ok", attempts=[attempt(1, "FAILED", LOST), attempt(2, "SUCCEEDED")]),
         RunStatus.SUCCEEDED, EndReason.COMPLETED, "ok", 2, 48.5, carried_by=Carrier.SUPERVISOR),
    Case("retried, the record behind its last attempt",
         record(status="FAILED", end_time=END, completed_by="companion", carried_by="companion",
                attempts=[attempt(1, "FAILED", LOST), attempt(2, "SUCCEEDED")]),
         RunStatus.SUCCEEDED, EndReason.COMPLETED, "attempt 2 (r1-retry1) ended SUCCEEDED", 2, 48.5),
    Case("retries used up", record(status="FAILED", end_time=END, completed_by="supervisor", carried_by="supervisor",
                                   message=LOST, attempts=[attempt(1, "FAILED", LOST), attempt(2, "FAILED", LOST)]),
         RunStatus.FAILED, EndReason.DRIVER_LOST, LOST, 2, 48.5, carried_by=Carrier.SUPERVISOR),
    Case("pipeline", record(status="SUCCEEDED", end_time=END, completed_by="supervisor", carried_by="supervisor",
                            steps=[{"name": "prep", "run_id": "p1"}, {"name": "train", "run_id": "p2"}]),
         RunStatus.SUCCEEDED, EndReason.COMPLETED, None, 1, 48.5, carried_by=Carrier.SUPERVISOR),
    Case("companion lost", record(status="RUNNING", carried_by="companion", last_seen=at(600)),
         RunStatus.UNKNOWN, EndReason.COMPANION_LOST, "its companion was last seen 2026-12-02T11:50:00Z", 1, None),
    Case("companion beating", record(status="RUNNING", carried_by="companion", last_seen=at(10),
                                     start_time="2026-12-02T11:59:00.000+00:00"),
         RunStatus.RUNNING, EndReason.NONE, None, 1, 60.0),
    Case("cluster gone", record(status="RUNNING", updated_at="2026-12-02T11:10:00+00:00"),
         RunStatus.UNKNOWN, EndReason.CLUSTER_GONE,
         "its cluster no longer knows this run; last seen RUNNING at 2026-12-02T11:10:00Z, its end was never recorded",
         1, None, cluster_forgot=True, carried_by=Carrier.CLIENT),
    Case("storage down: the ledger's row, the cluster's live end",
         None, RunStatus.SUCCEEDED, EndReason.COMPLETED, None, 1, 47.75,  # the record's start, the cluster's end
         row=record(status="RUNNING"),
         live=RunInfo(id="r1", job="train", backend="local", status=RunStatus.SUCCEEDED,
                      start_time="2026-12-02T11:00:01+00:00", end_time="2026-12-02T11:00:48+00:00"),
         carried_by=Carrier.CLIENT),
    Case("storage back: the run side's end and its milliseconds stand over the cluster's",
         record(status="SUCCEEDED", end_time=END, completed_by="companion", carried_by="companion", message="done"),
         RunStatus.SUCCEEDED, EndReason.COMPLETED, "done", 1, 48.5,
         row=record(status="RUNNING"),
         live=RunInfo(id="r1", job="train", backend="local", status=RunStatus.SUCCEEDED,
                      start_time="2026-12-02T11:00:01+00:00", end_time="2026-12-02T11:00:48+00:00")),
    Case("outputs not stored", record(status="SUCCEEDED", end_time=END, completed_by="companion",
                                      carried_by="companion",
                                      outputs={"complete": False, "not_stored": 3, "kept_at": "node:/tmp/x"}),
         RunStatus.SUCCEEDED, EndReason.COMPLETED, None, 1, 48.5, outputs_complete=False),
    Case("stopped", record(status="STOPPED", end_time=END, completed_by="client", message="stopped by alice"),
         RunStatus.STOPPED, EndReason.STOPPED, "stopped by alice", 1, 48.5, carried_by=Carrier.CLIENT),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_verdict_of_each_kind_of_run(case: Case) -> None:
    seen = verdict(case.stored, case.row, case.live, NOW, cluster_forgot=case.cluster_forgot)
    assert (seen.status, seen.reason, seen.line, seen.attempts, seen.duration_s, seen.outputs_complete,
            seen.carried_by) == (case.status, case.reason, case.line, case.attempts, case.duration_s,
                                 case.outputs_complete, case.carried_by)


RECORDED = [c for c in CASES if c.stored is not None and c.row is None and c.live is None and not c.cluster_forgot]


@pytest.mark.parametrize("case", RECORDED, ids=[c.name for c in RECORDED])
def test_every_view_of_a_recorded_run_says_the_same(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status`/`show`/the UI's page read the record; `runs --storage` and the UI's list read its index entry:
    the same status, line, attempts, times and duration."""
    from rtjob.core import clock

    monkeypatch.setattr(clock, "now", lambda: NOW)
    assert case.stored is not None
    by_record = of_record(case.stored, NOW)
    by_entry = of_entry(entry_of(case.stored), NOW)
    listed = seen_row(entry_of(case.stored), NOW)
    shown = remembered_info(case.stored, cluster_forgot=False)
    assert said(shown, NOW) == {key: by_record.to_json()[key] for key in AGREED}  # `status -o json`'s "verdict"
    for other in (by_entry,):
        assert (other.status, other.reason, other.line, other.attempts, other.started, other.ended,
                other.duration_s) == (by_record.status, by_record.reason, by_record.line, by_record.attempts,
                                      by_record.started, by_record.ended, by_record.duration_s)
    assert (listed["status"], listed["attempts"], listed["duration_s"], listed["line"], listed["end_time"]) == (
        by_record.status.value, by_record.attempts, by_record.duration_s, by_record.line, by_record.ended)
    assert (shown.status, shown.attempts, shown.end_time) == (by_record.status, by_record.attempts, by_record.ended)


def test_an_index_entry_carries_what_the_verdict_needs() -> None:
    lost = record(status="RUNNING", carried_by="companion", last_seen=at(600))
    entry = entry_of(lost)
    assert {k: entry[k] for k in ("carried_by", "last_seen", "attempts", "reason")} == {
        "carried_by": "companion", "last_seen": lost.last_seen, "attempts": 1, "reason": "none"}
    retried = CASES[4].stored
    assert retried is not None and entry_of(retried)["reason"] == "driver_lost"


def test_a_verdict_needs_something_to_judge() -> None:
    with pytest.raises(ValueError):
        verdict(None, None, None, NOW)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_what_status_prints_is_the_verdict(case: Case) -> None:
    """`status -o json`'s "verdict" (said: from the RunInfo the verdict judged) is the verdict's own words, for
    every kind of run, as `show -o json`, `runs --storage -o json` and the UI's API print them (Verdict.to_json)."""
    seen = verdict(case.stored, case.row, case.live, NOW, cluster_forgot=case.cluster_forgot)
    base = case.live or (case.stored or case.row).to_run_info()  # type: ignore[union-attr]
    assert said(seen.onto(base), NOW) == {key: seen.to_json()[key] for key in AGREED}


def step(status: RunStatus, start: str | None = START, end: str | None = END, message: str | None = None) -> RunInfo:
    return RunInfo(id="s", job="step", backend="local", status=status, message=message, start_time=start,
                   end_time=end if status.terminal else None)


def pipeline(status: str, **fields: Any) -> RunRecord:
    return record(status=status, start_time=None, carried_by="supervisor",
                  steps=[{"name": "prep", "run_id": "p1"}, {"name": "train", "run_id": "p2"}], **fields)


LATER = "2026-12-02T11:02:00.250+00:00"  # the second step's end: 120 s after START
PIPELINES = [
    # (name, record, steps read, ended (its supervisor's late end), status, reason, line, started, ended, duration)
    ("ended: its record's end stands, its steps' times", pipeline("SUCCEEDED", end_time=LATER),
     [("prep", step(RunStatus.SUCCEEDED)), ("train", step(RunStatus.SUCCEEDED, END, LATER))], None,
     RunStatus.SUCCEEDED, EndReason.COMPLETED, None, START, LATER, 120.0),
    ("a step failed, its record not ended yet", pipeline("RUNNING", last_seen=at(5)),
     [("prep", step(RunStatus.SUCCEEDED)), ("train", step(RunStatus.FAILED, END, LATER, "ValueError: bad lr\nTb"))],
     None, RunStatus.FAILED, EndReason.SCRIPT_FAILED, "step train FAILED: ValueError: bad lr", START, LATER, 120.0),
    ("its supervisor not seen, a step still running: the steps say", pipeline("RUNNING", last_seen=at(600)),
     [("prep", step(RunStatus.SUCCEEDED)), ("train", step(RunStatus.RUNNING, END))], None,
     RunStatus.RUNNING, EndReason.NONE, None, START, None, 3599.75),
    ("no step read (a list): its record's verdict", pipeline("RUNNING", last_seen=at(600)), [], None,
     RunStatus.UNKNOWN, EndReason.COMPANION_LOST, "its supervisor was last seen 2026-12-02T11:50:00Z", START, None,
     None),
    ("its supervisor's end, recorded late", pipeline("RUNNING", last_seen=at(5)),
     [("prep", step(RunStatus.SUCCEEDED)), ("train", None)], RunStatus.STOPPED,
     RunStatus.STOPPED, EndReason.STOPPED, None, START, END, 48.5),
]


@pytest.mark.parametrize("case", PIPELINES, ids=[c[0] for c in PIPELINES])
def test_a_pipelines_verdict(case: tuple[Any, ...]) -> None:
    """`status PIPE` (its steps as the backend reports them), `show PIPE` and the UI's page (as their records have
    them: runs/view.recorded_pipeline_verdict) say the pipeline's verdict from one function."""
    from rtjob.core.pipeline_verdict import pipeline_verdict
    from rtjob.runs import view

    _name, pipe, steps, ended, status, reason, line, started, finished, duration = case
    seen = pipeline_verdict(pipe, steps, NOW, ended=ended)
    assert (seen.status, seen.reason, seen.line, seen.attempts, seen.started, seen.ended, seen.duration_s) == (
        status, reason, line, 1, started, finished, duration)
    if ended is None:  # `show`'s way in: the steps as dicts (recorded_steps), the same verdict
        as_dicts = [{"name": name, "run_id": "p", "status": info.status.value if info else None,
                     "message": info.message if info else None, "start_time": info.start_time if info else None,
                     "end_time": info.end_time if info else None} for name, info in steps]
        with pytest.MonkeyPatch.context() as patch:
            from rtjob.core import clock

            patch.setattr(clock, "now", lambda: NOW)
            assert view.recorded_pipeline_verdict(pipe, as_dicts) == seen


@pytest.mark.parametrize(("not_stored", "said_of_it"), [(3, "outputs not stored: 3 file(s), kept at node:/tmp/x"),
                                                       (0, "outputs not stored: its end only (every file is stored)")])
def test_what_is_not_stored_is_said_by_count_or_as_the_end_alone(not_stored: int, said_of_it: str) -> None:
    """Storage going down after the last file but before the run's end: "0 file(s) not stored" would read as
    nothing missing, so the line names the end instead."""
    from rtjob.commands.printing import outputs_line, run_text

    info = RunInfo(id="r1", job="train", backend="local", status=RunStatus.SUCCEEDED,
                   outputs={"complete": False, "not_stored": not_stored, "kept_at": "node:/tmp/x"})
    line = outputs_line(info)
    assert line is not None and said_of_it in line and "rtjob sync r1" in line
    assert f"NOT STORED: {said_of_it.removeprefix('outputs not stored: ')}" in run_text(info)


@pytest.mark.parametrize(("status", "end", "shown"), [("UNKNOWN", None, "-"), ("QUEUED", None, "-"),
                                                     ("FAILED", None, "-"), ("SUCCEEDED", END, "0m48s")])
def test_the_printed_duration_is_the_verdicts(status: str, end: str | None, shown: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`status`, `runs --storage` and `wait` print the verdict's duration: none for a run whose end was never seen
    (an UNKNOWN one read days later printed a growing "148h23m" while its JSON and the UI said none)."""
    from rtjob.commands.printing import duration, run_text
    from rtjob.core import clock

    monkeypatch.setattr(clock, "now", lambda: NOW + dt.timedelta(days=6))
    info = RunInfo(id="r1", job="train", backend="local", status=RunStatus(status), start_time=START, end_time=end)
    assert duration(info) == shown and f"duration:    {shown}" in run_text(info)
