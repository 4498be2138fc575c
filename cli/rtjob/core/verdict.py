"""A run's verdict: what every view shows of one run (`status`, `show`, `list`, `runs`, `runs --storage`, `wait`,
`logs`, `results`, `pull`, the UI's pages and API), computed here and nowhere else.

``verdict`` is a pure function of what is known of the run: its record in storage, this machine's ledger row (a
cache of an earlier verdict), the backend's live answer if one was asked, and the time now. One rule for each
question, so two views of one run never disagree:

- **status:** an end the run side wrote (companion, supervisor) stands over everything; else the backend's live
  answer; else the record's. A run not ended whose carrier has not beaten for STALE_S is UNKNOWN,
  ``COMPANION_LOST``; one the backend no longer knows (its cluster stopped or restarted) and whose end was never
  recorded is UNKNOWN, ``CLUSTER_GONE``. A retried run is one story: its latest attempt's status.
- **times:** from one source. The start is the record's (the first attempt's), the end the record's when it has
  one (to the millisecond, as the run side wrote it), else the backend's. The duration is computed from those two
  (a run that goes on counts up to ``now``; one whose state is unknown has none).
- **line:** the end's one line (``_line``); ``message`` keeps the whole text.

Stdlib, rtjob.core and rtjob_contract only: the run side may import it (a kernel module).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from enum import Enum
from typing import Any

from . import clock
from .end_words import end_line
from .lifecycle import ended_by_run_side, forgotten, merge
from .model import RunInfo, RunStatus
from .queueing import Place, place_of
from .record import STALE_S, RunRecord


class EndReason(str, Enum):
    """Why a run is where it is (as Ray's JobErrorType and dstack's termination reasons name an end)."""

    NONE = "none"  # not ended: pending or running
    QUEUED = "queued"  # waiting in a team's queue: not sent to the cluster yet (core/queueing.py)
    KEEPER_LOST = "keeper_lost"  # queued, and its queue's keeper does not hold the queue's lease: state not known
    COMPLETED = "completed"  # its script exited 0
    SCRIPT_FAILED = "script_failed"  # its script failed (non-zero exit, an error the platform reported)
    DRIVER_LOST = "driver_lost"  # its driver was lost or killed (a node lost, the OOM killer) and no retry was left
    STOPPED = "stopped"  # a user stopped it
    COMPANION_LOST = "companion_lost"  # not ended, and its carrier stopped beating: state not known
    CLUSTER_GONE = "cluster_gone"  # its cluster no longer knows it and its end was never recorded
    UNKNOWN = "unknown"  # the backend itself does not know its state


class Carrier(str, Enum):
    """Who carries the run where it runs (the record's ``carried_by``; a run no run side carries: the client)."""

    COMPANION = "companion"
    SUPERVISOR = "supervisor"
    CLIENT = "client"


@dataclass(frozen=True)
class Verdict:
    """What every view shows of one run."""

    id: str
    status: RunStatus
    reason: EndReason
    line: str | None  # the end's (or the state's) one line
    message: str | None  # the whole text the line was made from
    attempts: int
    started: str | None  # ISO 8601 as recorded (milliseconds kept)
    ended: str | None
    duration_s: float | None
    carried_by: Carrier
    last_seen: str | None
    outputs: dict[str, Any] | None  # the record's "outputs" of an ended run; None: not said (still running, older)
    exit_code: int | None = None
    place: Place | None = None  # a queued run's place in its queue (its position: 1 = the next admitted)

    @property
    def outputs_complete(self) -> bool | None:
        return None if self.outputs is None else bool(self.outputs["complete"])

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": self.reason.value, "line": self.line,
                "attempts": self.attempts, "start_time": self.started, "end_time": self.ended,
                "duration_s": self.duration_s, "carried_by": self.carried_by.value, "last_seen": self.last_seen,
                "outputs_complete": self.outputs_complete,
                **({"queue": self.place.queue, "position": self.place.position} if self.place is not None else {})}

    def onto(self, info: RunInfo) -> RunInfo:
        """``info`` (a backend's or a record's RunInfo: its id, address, storage) saying this verdict."""
        return dataclasses.replace(info, status=self.status, message=self.message, start_time=self.started,
                                   end_time=self.ended, exit_code=self.exit_code, attempts=self.attempts,
                                   reason=self.reason.value, outputs=self.outputs if self.outputs is not None else info.outputs)


def verdict(stored: RunRecord | None, row: RunRecord | None = None, live: RunInfo | None = None,
            now: dt.datetime | None = None, *, cluster_forgot: bool = False, place: Place | None = None) -> Verdict:
    """The run's verdict from what is known of it (see the module's docstring). ``cluster_forgot``: the backend was
    asked and does not know the run (never set for a teammate's run on another machine: its cluster is not ours
    to ask). ``place``: a queued run's place as its queue's state tells it (else the record's queue name alone)."""
    now = now or clock.now()
    record = _known(stored, row)
    if record is None and live is None:
        raise ValueError("a verdict needs a record or a live answer")
    status, message, code = _state(record, live)
    reason = _reason(record, status, code)
    place = (place or place_of(record)) if status == RunStatus.QUEUED and record is not None else None
    if place is not None:  # no cluster knows it yet: never forgotten; unknown only when its keeper is lost
        lost = place.lost()
        status, reason, message = (RunStatus.UNKNOWN, EndReason.KEEPER_LOST, lost) if lost else \
            (status, EndReason.QUEUED, place.line())
    elif not status.terminal and record is not None and (live is None or not _live_ended(live)):
        seen = record.stale_why(STALE_S, now) if live is None else None
        if seen is not None:
            status, reason, message = RunStatus.UNKNOWN, EndReason.COMPANION_LOST, seen
        elif cluster_forgot and live is None:
            status, reason, message = RunStatus.UNKNOWN, EndReason.CLUSTER_GONE, forgotten(record)
    if status == RunStatus.UNKNOWN and reason == EndReason.NONE:
        reason = EndReason.UNKNOWN
    started, ended = _times(record, live, status)
    return Verdict(
        id=record.id if record is not None else live.id if live is not None else "?",
        status=status, reason=reason, line=_line(message, status), message=message,
        attempts=max(len(record.attempts) if record is not None else 0, live.attempts if live else 1, 1),
        started=started, ended=ended, duration_s=_duration(started, ended, status, now),
        carried_by=_carrier(record), last_seen=record.last_seen if record is not None else None,
        outputs=_outputs(record, status), exit_code=code, place=place if status == RunStatus.QUEUED else None)


AGREED = ("status", "reason", "line", "attempts", "start_time", "end_time", "duration_s")  # what every view says


def said(info: RunInfo, now: dt.datetime | None = None) -> dict[str, Any]:
    """What a run judged by its verdict (``info``: ``Verdict.onto``'s, or a backend's own answer for a run the
    client carries) says, in ``Verdict.to_json``'s words: status, reason, line, attempts, times, duration (`status
    -o json`'s "verdict")."""
    reason = EndReason(info.reason) if info.reason else _reason(None, info.status, info.exit_code)
    if info.status == RunStatus.UNKNOWN and reason == EndReason.NONE:
        reason = EndReason.UNKNOWN
    return {"status": info.status.value, "reason": reason.value, "line": _line(info.message, info.status),
            "attempts": info.attempts, "start_time": info.start_time, "end_time": info.end_time,
            "duration_s": run_seconds(info, now)}


def run_seconds(info: RunInfo, now: dt.datetime | None = None) -> float | None:
    """How long the run has run by the verdict's rule (None: not started, queued, UNKNOWN, or an end never seen)."""
    return _duration(info.start_time, info.end_time, info.status, now or clock.now())


def of_record(record: RunRecord, now: dt.datetime | None = None, *, cluster_forgot: bool = False,
              place: Place | None = None) -> Verdict:
    """The verdict of a run known only by its record (a teammate's, a run its cluster no longer holds, a queued
    run: ``place``, its place as its queue tells it)."""
    return verdict(record, None, None, now, cluster_forgot=cluster_forgot, place=place)


def end_reason(record: RunRecord) -> EndReason:
    """The reason of the record's own state, as its writer recorded it (an index entry keeps it): no reader's
    verdict (stale, forgotten) in it."""
    status, _message, code = recorded_state(record)
    return _reason(record, status, code)


def of_entry(row: dict[str, Any], now: dt.datetime | None = None, *, place: Place | None = None) -> Verdict:
    """The verdict of a run listed by its team's index entry (core/index_entry.entry_of): what its record says,
    the attempts the entry counted (a queued run's place: ``place``, else its queue's name)."""
    record = RunRecord(id=str(row["id"]), job=row.get("job"), backend=str(row.get("backend") or "?"),
                       status=str(row.get("status") or RunStatus.UNKNOWN.value), message=row.get("message"),
                       exit_code=row.get("exit_code"), submitted_at=row.get("submitted_at"),
                       start_time=row.get("start_time"), end_time=row.get("end_time"),
                       updated_at=row.get("updated_at"), carried_by=row.get("carried_by"),
                       last_seen=row.get("last_seen"), completed_by=row.get("completed_by"),
                       outputs=row.get("outputs") if isinstance(row.get("outputs"), dict) else None,
                       queue=row.get("queue") if isinstance(row.get("queue"), dict) else None)
    seen = verdict(record, None, None, now, place=place)
    counted = row.get("attempts")
    reason = seen.reason
    if reason == EndReason.SCRIPT_FAILED and row.get("reason") == EndReason.DRIVER_LOST.value:
        reason = EndReason.DRIVER_LOST  # the entry's writer saw the attempts: its reason stands
    return dataclasses.replace(seen, reason=reason,
                               attempts=max(seen.attempts, counted if isinstance(counted, int) else 1))


def _known(stored: RunRecord | None, row: RunRecord | None) -> RunRecord | None:
    """The one record the verdict reads: the ledger's row joined with the stored record (the run side's end, its
    beats and attempts stand: lifecycle.merge)."""
    if row is None or stored is None:
        return stored or row
    return merge(row, stored)


def _live_ended(live: RunInfo) -> bool:
    return live.status.terminal


def _state(record: RunRecord | None, live: RunInfo | None) -> tuple[RunStatus, str | None, int | None]:
    """Status, message, exit code: the run side's end, else the live answer, else the record (its last attempt's
    end where it is newer than the record's status: one story)."""
    if record is not None and (live is None or ended_by_run_side(record)):
        status, message, code = recorded_state(record)
        if message is None and live is not None and live.status == status:
            message = live.message  # the run side wrote its end without words: the backend's, of the same end
        return status, message, code
    assert live is not None
    return live.status, live.message, live.exit_code


def recorded_state(record: RunRecord) -> tuple[RunStatus, str | None, int | None]:
    """Status, message, exit code as the record tells them, one story: a retried run's last recorded attempt's
    end where it is newer than the record's status (a record written before the retry's end was seen)."""
    status, message, code = record.run_status, record.message, record.exit_code
    if len(record.attempts) > 1 and not record.steps:
        last = record.attempts[-1]
        try:
            latest = RunStatus(str(last.get("status")))
        except ValueError:
            return status, message, code
        if latest.terminal and latest != status:
            exit_code = last.get("exit_code")
            return (latest, f"attempt {len(record.attempts)} ({last.get('id')}) ended {latest.value}",
                    exit_code if isinstance(exit_code, int) else None)
    return status, message, code


def _reason(record: RunRecord | None, status: RunStatus, code: int | None) -> EndReason:
    if status == RunStatus.SUCCEEDED:
        return EndReason.COMPLETED
    if status == RunStatus.STOPPED:
        return EndReason.STOPPED
    if status != RunStatus.FAILED:
        return EndReason.NONE
    last = record.attempts[-1] if record is not None and record.attempts else {}
    return EndReason.DRIVER_LOST if isinstance(last, dict) and last.get("retry_reason") else EndReason.SCRIPT_FAILED


def _times(record: RunRecord | None, live: RunInfo | None, status: RunStatus) -> tuple[str | None, str | None]:
    """Start and end from one source: the record's (milliseconds kept), the backend's where the record has none."""
    started = record.start_time if record is not None else None
    started = started or (live.start_time if live is not None else None) or \
        (record.submitted_at if record is not None else None)
    if not status.terminal:
        return started, None
    ended = record.end_time if record is not None and record.run_status.terminal else None
    return started, ended or (live.end_time if live is not None else None) or \
        (record.end_time if record is not None else None)


def _duration(started: str | None, ended: str | None, status: RunStatus, now: dt.datetime) -> float | None:
    if not started or status in (RunStatus.UNKNOWN, RunStatus.QUEUED) or (status.terminal and not ended):
        return None
    try:
        end = clock.parse(ended) if ended else now
        return round(max(0.0, (end - clock.parse(started)).total_seconds()), 3)
    except ValueError:
        return None


def _carrier(record: RunRecord | None) -> Carrier:
    try:
        return Carrier(record.carried_by) if record is not None and record.carried_by else Carrier.CLIENT
    except ValueError:
        return Carrier.CLIENT


def _outputs(record: RunRecord | None, status: RunStatus) -> dict[str, Any] | None:
    outputs = record.outputs if record is not None else None
    if not status.terminal or not isinstance(outputs, dict) or "complete" not in outputs:
        return None
    return outputs


def _line(message: str | None, status: RunStatus) -> str | None:
    """The end's one line in rtjob's words (core/end_words.py: Ray's job-manager lines and the wrapper dropped)."""
    return end_line(message, status.value)
