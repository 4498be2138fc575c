"""A pipeline run's status from its steps' statuses: one rule that the client (runs/pipelines/) and the pipeline's
supervisor on the cluster (runside/supervisor/pipeline_folder.py) both apply, so it lives below both; and a pipeline
run's verdict (``pipeline_verdict``), what `status`, `show`, `runs` and the UI say of it.

Stdlib and rtjob.core only: the cluster runs it (import-linter: lifecycle-kernel)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from .model import RunInfo, RunStatus

if TYPE_CHECKING:
    from .record import RunRecord
    from .verdict import Verdict


def overall(statuses: list[RunStatus | None]) -> RunStatus:
    """A pipeline run's status from its steps' (None: not submitted yet): the first step that did not succeed
    decides; all succeeded is SUCCEEDED; else it is RUNNING once a step was submitted."""
    for status in statuses:
        if status in (RunStatus.FAILED, RunStatus.STOPPED, RunStatus.UNKNOWN):
            return status
        if status != RunStatus.SUCCEEDED:
            return RunStatus.RUNNING if any(s is not None for s in statuses) else RunStatus.PENDING
    return RunStatus.SUCCEEDED


def pipeline_verdict(record: RunRecord, steps: list[tuple[str, RunInfo | None]], now: dt.datetime | None = None,
                     *, ended: RunStatus | None = None) -> Verdict:
    """A pipeline run's verdict from its record (with what its supervisor wrote since) and its steps as they were
    read (name, the step run's judged info; None: not submitted): an end its record holds stands (its supervisor's,
    or the client's that stopped it); else the end its supervisor recorded late (``ended``); else its steps'
    (``overall``); no step read (the UI's list): the record's own verdict. Its start is its record's (its start,
    else its submission: what every list reads) or its first step's; its end (once it ended) its record's or its
    last step's; its line its record's once it ended (every list says it from there), else the first step's that
    did not succeed. A pipeline is one attempt: its steps have theirs."""
    from . import clock
    from .verdict import EndReason, _duration, _line, of_record

    now = now or clock.now()
    own = of_record(record, now)
    infos = [info for _, info in steps]
    status, reason, line = own.status, own.reason, own.line
    if not record.run_status.terminal and steps:
        status = ended or overall([info.status if info else None for info in infos])
        reason = {RunStatus.SUCCEEDED: EndReason.COMPLETED, RunStatus.STOPPED: EndReason.STOPPED,
                  RunStatus.FAILED: EndReason.SCRIPT_FAILED, RunStatus.UNKNOWN: EndReason.UNKNOWN}.get(
                      status, EndReason.NONE)
        failed = next(((name, info) for name, info in steps if info is not None and info.status == status
                       and status.terminal and status != RunStatus.SUCCEEDED), None)
        said = _line(failed[1].message, failed[1].status) if failed is not None else None
        line = None if failed is None else f"step {failed[0]} {status.value}" + (f": {said}" if said else "")
    starts = sorted(info.start_time for info in infos if info is not None and info.start_time)
    ends = sorted(info.end_time for info in infos if info is not None and info.end_time)
    started = own.started or (starts[0] if starts else None)  # the record's, as every list reads it
    finished = (record.end_time if record.run_status.terminal else None) or (ends[-1] if ends else None)
    finished = finished if status.terminal else None
    return dataclasses.replace(own, status=status, reason=reason, line=line, message=line or own.message,
                               attempts=1, started=started, ended=finished,
                               duration_s=_duration(started, finished, status, now))
