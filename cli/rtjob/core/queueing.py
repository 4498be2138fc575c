"""What a reader knows of a queued run's place in its queue (``Place``), which the verdict (core/verdict.py) turns
into the one line every view shows (issue 44). Its transitions (queued, admitted, cancelled while queued) are
values in the kernel: core/lifecycle/queued.py.

QUEUED comes before PENDING: the submitting client writes ``queued`` (the run's record, its queue); the queue's
keeper on the cluster writes ``admitted`` when it sent the run to the cluster (PENDING from then on, as any run),
or ``cancelled`` when a cancel reached it first (STOPPED, the run never reached the cluster). Each is idempotent.
A queued run is never stale or forgotten while its keeper holds the queue's lease: no cluster knows it yet.

Stdlib and rtjob.core only: the keeper on the cluster imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import RunStatus, stamp
from .record import RunRecord


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
        return (f"queued in {self.queue}, whose keeper is {seen}: the next submit or wait that reaches the "
                "cluster starts it")


def place_of(record: RunRecord) -> Place | None:
    """What the record alone says of a queued run's place (its queue's name), without reading the queue."""
    if record.run_status != RunStatus.QUEUED:
        return None
    return Place(queue=str((record.queue or {}).get("name") or "?"))
