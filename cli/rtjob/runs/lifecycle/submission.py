"""A run's central use case, its first half: its storage checked (storage_check.py: its record written there before
anything starts), then submit it and write the kernel's ``submitted`` (every submit, rerun and pipeline step
alike); the run's supervisor started where the backend has one. Following it to its end is
follow.py's loop. No Click: what happens is told through RunEvents."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...core import lifecycle
from ...core.errors import RtjobError
from ...core.model import RunStatus
from ..memory import ledger, write
from ..records import new_record, now_ms
from ..runner import Submitted
from . import storage_check
from .archive import observe
from .patience import Patience

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo
    from ...core.record import RunRecord
    from ..events import RunEvents
    from ..runner import Plan


def submit(planned: Plan, *, attach: bool, events: RunEvents,
           unsent: Callable[[], None] | None = None) -> Submitted:
    """Make the backend ready (the embedded cluster starts here), attach to the run if ``attach`` and it
    exists, else check that the job can fit and submit the planned request. ``unsent``: called when this fails
    before the backend accepted the run (or found it), then the error is raised."""
    try:
        done = _send(planned, attach, events)
    except BaseException:
        if unsent is not None:
            unsent()
        raise
    _supervise(planned.backend, done.run, events)
    return done


def _send(planned: Plan, attach: bool, events: RunEvents) -> Submitted:
    backend = planned.backend
    backend.prepare(planned.job, events.note)
    # Faults that may pass are waited out here too: the existence check makes a repeated submit an attach.
    patience = Patience(events.note)
    existing = patience.call_sync(lambda: backend.find(planned.job.run_id)) if attach else None
    if existing is not None:
        return Submitted(existing, created=False)
    warnings = patience.call_sync(lambda: backend.precheck(planned.job))  # never fits: exit 2, queued or not
    from ..queued import keeper_sends

    queued = keeper_sends(planned)
    if queued:
        from ..queued import refuse_if_never_fits

        lease = refuse_if_never_fits(planned)  # nor at the cluster's largest, which its queue's keeper read: exit 2
    for warning in warnings:
        events.warning(warning)
    if queued:
        from ..queued import enqueue

        return enqueue(planned, events, lease)
    if planned.upload is not None:
        events.note(f"uploading working dir {planned.upload.describe()}")
    sent = now_ms()  # the start-up timeline's first stages: sent (the upload follows), accepted
    result = patience.call_sync(lambda: backend.submit(planned.request))
    accepted = now_ms()
    return Submitted(result.run, result.created, {"submitted": sent, "accepted": accepted} if result.created else {})


def _supervise(backend: Backend, run: RunInfo, events: RunEvents) -> None:
    """The run's supervisor on the cluster (where the backend has one and the run needs it: retries), started or
    attached to; one warning if it cannot be, and the run goes on (a follower still retries it)."""
    if run.status.terminal or run.status == RunStatus.QUEUED:  # a queued run's: started when it is admitted
        return
    try:
        supervisor = Patience(events.note).call_sync(lambda: backend.supervise(run.id))
    except RtjobError as exc:
        events.warning(f"no supervisor for {run.id} ({exc}): its retries happen only while rtjob follows it")
        return
    if supervisor is not None:
        events.note(f"supervisor {supervisor.id} carries the run's retries on the cluster")


def submit_and_record(planned: Plan, *, attach: bool, events: RunEvents,
                      check_storage: bool | None = None) -> Submitted:
    """Check the run's storage by writing its record there first (storage_check.py; ``check_storage`` None: as
    the settings say, False: checked already, a pipeline's), submit the planned run (or attach to it: ``attach``
    and its id exists), record it in the ledger and its storage (the run outlives its cluster), and tell
    ``events.submitted``. A submit that fails before the backend accepted the run withdraws the record the check
    wrote."""
    wanted = storage_check.wanted(planned.settings) if check_storage is None else check_storage
    checked = storage_check.check(pending_record(planned), events) if wanted else None
    done = submit(planned, attach=attach, events=events,
                  unsent=None if checked is None else lambda: checked.withdraw(events))
    _record(planned, done.run, events, done.timeline)
    events.submitted(planned, done)
    return done


def pending_record(planned: Plan) -> RunRecord:
    """The record of the planned run before it is sent: PENDING under its planned id (what the storage check
    writes; the submit's own record is written over it)."""
    from ...core.model import RunInfo

    job = planned.job
    return new_record(planned, RunInfo(job.run_id, job.spec.name, planned.backend.name, RunStatus.PENDING,
                                       storage_uri=job.storage_uri, storage_endpoint=job.storage_endpoint))


def _record(planned: Plan, info: RunInfo, events: RunEvents, timeline: dict[str, str]) -> None:
    """The kernel's ``submitted`` on a new record (the submitter's: its spec and request), unless this ledger
    already holds the submitter's own (an attach): that one is observed."""
    book = ledger()
    try:
        known = book.get(info.id)
    except RtjobError as exc:
        events.warning(f"run ledger not read: {exc.message}")
        known = None
    if known is not None and known.spec is not None:
        observe(planned.backend, info, events)
        return
    made, queue = new_record(planned, info, timeline), planned.job.queue
    if queue is not None:  # the queue it waits in (on Anyscale: Anyscale's job queue), as its record keeps it
        from ..queued import record_queue

        made.queue = record_queue(queue)
        if info.status == RunStatus.QUEUED:  # in rtjob's queue: QUEUED until its keeper admits it
            write(made, [lifecycle.Submitted(), lifecycle.Queued(record_queue(queue))], events)
            return
    write(made, lifecycle.Submitted(), events)
