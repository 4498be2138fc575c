"""A pipeline run its supervisor carries on the cluster, as a client sees it: the supervisor started (or attached
to) at submit with every step's request; a client that follows or waits never submits a step itself, it waits for
the supervisor to submit it and attaches (the step ids are deterministic, so a step runs once); a supervisor that
died is replaced by the next client that looks (`status`, `wait`, a second submit), which goes on from the record;
the pipeline's end as its supervisor recorded it (a stop between steps leaves steps that never ran)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ...core.errors import RtjobError, WaitTimeout
from ...core.model import RunStatus
from ..lifecycle.patience import Patience
from ..memory import stored_record

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo
    from ...core.record import RunRecord
    from ..events import RunEvents
    from .pipeline import PipelinePlan, StepPlan

POLL_S = 0.5  # a step appears within ~1 s of the one before ending


def start_supervisor(pp: PipelinePlan, steps: list[StepPlan], events: RunEvents) -> RunInfo | None:
    """The supervisor that runs ``steps`` (planned, not yet SUCCEEDED) in order; None: the backend has none, or it
    could not be started (one warning: a follower then advances the steps, as before)."""
    planned = [s for s in steps if s.plan is not None]
    if not planned or planned[0].plan is None:
        return None
    for step in planned:  # the embedded cluster starts (and grows to the largest step) here: no client later
        if step.plan is not None:
            pp.backend.prepare(step.plan.job, events.note)
    for upload in dict.fromkeys(s.plan.upload.describe() for s in planned if s.plan and s.plan.upload):
        events.note(f"uploading working dir {upload}")  # as a single job's submit says it (steps share one, often)
    from ..queued import queued_steps

    queued = queued_steps([s.plan for s in planned if s.plan is not None], pp.id, events)  # none: sent at once
    try:
        supervisor = Patience(events.note).call_sync(lambda: pp.backend.supervise_pipeline(
            pp.id, pp.storage_uri, pp.pipeline.name, [s.plan.request for s in planned if s.plan is not None],
            queued=queued))
    except RtjobError as exc:
        if pp.backend.pipeline_steps_inside:  # its steps run nowhere else
            raise
        events.warning(f"no supervisor for pipeline {pp.id} ({exc}): its steps advance only while rtjob follows them")
        return None
    if supervisor is not None:
        events.note(f"supervisor {supervisor.id} runs the pipeline's steps on the cluster")
    return supervisor


def supervisor_now(be: Backend, pipeline_id: str) -> RunInfo | None:
    """The pipeline's supervisor, replaced first when it died before the pipeline ended (exactly once: the next
    supervisor's id is deterministic); None: the pipeline has none."""
    try:
        return be.supervise(pipeline_id)
    except RtjobError:
        return be.supervisor_of(pipeline_id)


def await_step(be: Backend, pipeline_id: str, run_id: str, deadline: float | None) -> RunInfo | None:
    """The step ``run_id`` once the supervisor has submitted it; None when the supervisor ended without
    submitting it (the pipeline stopped, or a step before it did not succeed)."""
    while True:
        info = be.find(run_id)
        if info is not None:
            return info
        supervisor = be.supervisor_of(pipeline_id)
        if supervisor is None or supervisor.status.terminal:
            renewed = supervisor_now(be, pipeline_id) if supervisor is not None else None
            if renewed is None or renewed.status.terminal:
                return be.find(run_id)
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeout(f"pipeline {pipeline_id}: step {run_id} not submitted yet after the --timeout (its "
                              "supervisor goes on)")
        time.sleep(POLL_S)


def recorded_end(be: Backend, record: RunRecord, deadline: float | None) -> RunStatus | None:
    """The pipeline's end as its supervisor wrote it in the record, once the supervisor has ended; None: no
    supervisor carried it, or it did not write one."""
    while True:
        supervisor = be.supervisor_of(record.id)
        if supervisor is None:
            return None
        if supervisor.status.terminal:
            break
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(POLL_S)
    stored = stored_record(record)
    if stored is None or stored.carried_by != "supervisor" or not stored.run_status.terminal:
        return None
    record.status, record.message, record.steps = stored.status, stored.message, stored.steps or record.steps
    return stored.run_status if stored.run_status != RunStatus.UNKNOWN else None
