"""A pipeline run's verdict (``pipeline_verdict``): what `status`, `show`, `runs` and the UI say of it, from its
record and its steps, through the one verdict (core/verdict.py) and its steps' rule (core/pipeline_status.overall).

Stdlib and rtjob.core only (import-linter: lifecycle-kernel)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from . import clock
from .model import RunInfo, RunStatus
from .pipeline_status import overall
from .record import RunRecord
from .verdict import EndReason, Verdict, _duration, _line, of_record


def pipeline_verdict(record: RunRecord, steps: list[tuple[str, RunInfo | None]], now: dt.datetime | None = None,
                     *, ended: RunStatus | None = None) -> Verdict:
    """A pipeline run's verdict from its record (with what its supervisor wrote since) and its steps as they were
    read (name, the step run's judged info; None: not submitted): an end its record holds stands (its supervisor's,
    or the client's that stopped it); else the end its supervisor recorded late (``ended``); else its steps'
    (``overall``); no step read (the UI's list): the record's own verdict. Its start is its record's (its start,
    else its submission: what every list reads) or its first step's; its end (once it ended) its record's or its
    last step's; its line its record's once it ended (every list says it from there), else the first step's that
    did not succeed. A pipeline is one attempt: its steps have theirs."""
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
