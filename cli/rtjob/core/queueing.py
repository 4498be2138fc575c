"""A queued run in the lifecycle kernel (issue 44): its transitions (queued, admitted, cancelled while queued),
named functions over its record in core/lifecycle.py's style, and what a reader knows of its place in the queue
(``Place``), which the verdict (core/verdict.py) turns into the one line every view shows.

QUEUED comes before PENDING: the submitting client writes ``queued`` (the run's record, its queue); the queue's
keeper on the cluster writes ``admitted`` when it sent the run to the cluster (PENDING from then on, as any run),
or ``cancelled`` when a cancel reached it first (STOPPED, the run never reached the cluster). Each is idempotent.
A queued run is never stale or forgotten while its keeper holds the queue's lease: no cluster knows it yet.

Stdlib and rtjob.core only: the keeper on the cluster imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import clock
from .lifecycle import IllegalTransition, Writer
from .model import RunStatus, stamp
from .record import RunRecord

ADMITTED = "admitted"  # the timeline's stage: the keeper sent the run to the cluster
QUEUED_STAGE = "queued"


def _refuse(record: RunRecord, what: str, why: str) -> IllegalTransition:
    return IllegalTransition(f"run {record.id}: {what} refused: {why}")


def queued(record: RunRecord, queue: dict[str, Any], at: str | None = None) -> RunRecord:
    """The client enqueued the run in ``queue`` ({"name", "priority", "storage"}): QUEUED, the timeline's
    ``queued``. Never once it was admitted or ended (a queue never takes a run back)."""
    if ADMITTED in record.timeline or record.run_status not in (RunStatus.UNKNOWN, RunStatus.PENDING, RunStatus.QUEUED):
        raise _refuse(record, "queued", f"the run is {record.status}" + (" (admitted)" if ADMITTED in record.timeline
                                                                          else ""))
    at = at or clock.now_iso()
    record.status = RunStatus.QUEUED.value
    record.queue = dict(queue)
    record.submitted_at = record.submitted_at or at
    record.timeline.setdefault(QUEUED_STAGE, at)
    record.updated_at = at
    return record


def admitted(record: RunRecord, at: str | None = None, by: Writer = Writer.KEEPER) -> RunRecord:
    """The keeper sent the queued run to the cluster: PENDING (a run side's RUNNING or end already written stands),
    the timeline's ``admitted``. A run cancelled while queued is never admitted."""
    if by != Writer.KEEPER:
        raise _refuse(record, "admitted", f"only a queue's keeper admits, not the {by.value}")
    if record.run_status.terminal and ADMITTED not in record.timeline:
        raise _refuse(record, "admitted", f"the run ended {record.status} while queued")
    at = at or clock.now_iso()
    record.timeline.setdefault(ADMITTED, at)
    if record.run_status in (RunStatus.QUEUED, RunStatus.UNKNOWN):
        record.status = RunStatus.PENDING.value
        record.updated_at = at
    return record


def cancelled(record: RunRecord, why: str | None = None, at: str | None = None,
              by: Writer = Writer.KEEPER) -> RunRecord:
    """The run was cancelled while queued (``rtjob stop`` of a queued run, its cancel folded by the keeper, or a
    client that saw the keeper drop it): STOPPED, never sent to the cluster. Refused once it was admitted: then it
    is stopped on the cluster as any run."""
    if ADMITTED in record.timeline:
        raise _refuse(record, "cancelled", "the run was admitted: stop it on the cluster")
    if record.run_status == RunStatus.STOPPED:
        return record
    if record.run_status != RunStatus.QUEUED:
        raise _refuse(record, "cancelled", f"the run is {record.status}, not queued")
    at = at or clock.now_iso()
    name = (record.queue or {}).get("name", "?")
    record.status = RunStatus.STOPPED.value
    record.message = why or f"cancelled while queued in {name}: it never reached the cluster"
    record.end_time = at
    record.completed_by = by.recorded_as
    record.timeline.setdefault("ended", at)
    record.updated_at = at
    return record


@dataclass(frozen=True)
class Place:
    """A queued run's place as the queue's state tells it (the keeper's folding), for the verdict: its position
    (1 = the next to be admitted; None: not known), of how many queued, why it waits (the keeper's words, one
    line), and whether the keeper holds the queue's lease (None: not asked) and when it was last seen."""

    queue: str
    position: int | None = None
    of: int | None = None
    reason: str | None = None
    keeper_alive: bool | None = None
    keeper_seen: str | None = None
    held: bool = False  # the queue is held (`rtjob queue hold`): nothing is admitted until it is released

    def line(self) -> str:
        """"position 2 of 5 in team: needs 2 nodes × 1 GPU, 1 free; behind priority 10". A keeper's reason that is
        such a line already (its own position and queue) is the line as it is."""
        if self.reason and self.reason.startswith(("position ", f"queued in {self.queue}")):
            return self.reason
        if self.reason and self.position is None and self.reason.startswith(f"in {self.queue}"):
            return f"queued {self.reason}"  # "queued in team, not yet ordered by its keeper"
        where = (f"position {self.position}" + (f" of {self.of}" if self.of else "") + f" in {self.queue}"
                 if self.position is not None else f"queued in {self.queue}")
        why = "; ".join(filter(None, ["the queue is held" if self.held else None, self.reason]))
        return f"{where}: {why}" if why else where

    def lost(self) -> str | None:
        """Why the run's state is not known (its keeper's lease lapsed), or None while it holds it."""
        if self.keeper_alive is not False:
            return None
        seen = f"last seen {stamp(self.keeper_seen)}" if self.keeper_seen else "not running"
        return (f"queued in {self.queue}, whose keeper is {seen}: the next submit, wait or `rtjob queue` that "
                "reaches the cluster starts it")


def place_of(record: RunRecord) -> Place | None:
    """What the record alone says of a queued run's place (its queue's name), without reading the queue."""
    if record.run_status != RunStatus.QUEUED:
        return None
    return Place(queue=str((record.queue or {}).get("name") or "?"))
