"""A queued run's transitions (issue 44), values like the others: the submitting client enqueues it (``Queued``:
QUEUED, its queue, the timeline's ``queued``), the queue's keeper on the cluster sends it to the cluster
(``Admitted``: PENDING from then on, as any run) or a cancel reaches it first (``Cancelled``: STOPPED, it never
reached the cluster; a client's `rtjob stop` writes it too). Each is idempotent. A queued run is never stale or
forgotten while its keeper holds the queue's lease (core/queueing.Place, the verdict)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import RunStatus
from ..record import RunRecord
from .rules import Writer, refuse, rule
from .timelines import stage

ADMITTED = "admitted"  # the timeline's stage: the keeper sent the run to the cluster
QUEUED_STAGE = "queued"


def was_admitted(record: RunRecord) -> bool:
    """Whether a keeper ever sent the run to the cluster (any attempt's timeline: a retry's has no ``admitted``)."""
    return ADMITTED in record.timeline or any(ADMITTED in stages for stages in record.timelines.values())


@rule(leads_to="QUEUED", writers=(Writer.SUBMITTER, Writer.PIPELINE_SUPERVISOR),
      what="the run enqueued in its queue (a pipeline's step: by its supervisor, when the step before it ended; "
           "never once admitted or ended: a queue never takes a run back)")
@dataclass(frozen=True)
class Queued:
    """The client (a pipeline step's: its supervisor) enqueued the run in ``queue`` ({"name", "priority",
    "storage"}): QUEUED, the timeline's ``queued``, its submission time."""

    queue: dict[str, Any] = field(default_factory=dict)
    at: str | None = None
    by: Writer = Writer.SUBMITTER

    def change(self, record: RunRecord, at: str) -> None:
        if was_admitted(record) or record.run_status not in (RunStatus.UNKNOWN, RunStatus.PENDING, RunStatus.QUEUED):
            raise refuse(record, "queued", f"the run is {record.status}" + (" (admitted)" if was_admitted(record)
                                                                            else ""))
        record.status = RunStatus.QUEUED.value
        record.queue = dict(self.queue)
        record.submitted_at = record.submitted_at or at
        stage(record, None, QUEUED_STAGE, at)


@rule(leads_to="PENDING", writers=(Writer.KEEPER,),
      what="the keeper sent the queued run to the cluster (a run side's RUNNING or end already written stands)")
@dataclass(frozen=True)
class Admitted:
    """The keeper sent the queued run to the cluster: PENDING, the timeline's ``admitted``. A run cancelled while
    queued is never admitted."""

    at: str | None = None
    by: Writer = Writer.KEEPER

    def change(self, record: RunRecord, at: str) -> None:
        if record.run_status.terminal and not was_admitted(record):
            raise refuse(record, "admitted", f"the run ended {record.status} while queued")
        stage(record, None, ADMITTED, at)
        if record.run_status in (RunStatus.QUEUED, RunStatus.UNKNOWN):
            record.status = RunStatus.PENDING.value


@rule(leads_to="STOPPED", writers=(Writer.KEEPER, Writer.FOLLOWER),
      what="cancelled while queued (`rtjob stop`, or its cancel folded by the keeper): it never reached the cluster")
@dataclass(frozen=True)
class Cancelled:
    """The run was cancelled while queued: STOPPED, never sent to the cluster. Refused once it was admitted: then
    it is stopped on the cluster as any run."""

    why: str | None = None
    at: str | None = None
    by: Writer = Writer.KEEPER

    def change(self, record: RunRecord, at: str) -> None:
        if was_admitted(record):
            raise refuse(record, "cancelled", "the run was admitted: stop it on the cluster")
        if record.run_status == RunStatus.STOPPED:
            return
        if record.run_status != RunStatus.QUEUED:
            raise refuse(record, "cancelled", f"the run is {record.status}, not queued")
        name = (record.queue or {}).get("name", "?")
        record.status = RunStatus.STOPPED.value
        record.message = self.why or f"cancelled while queued in {name}: it never reached the cluster"
        record.end_time = at
        record.completed_by = self.by.recorded_as
        stage(record, None, "ended", at)
