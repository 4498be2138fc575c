"""A pipeline run's steps driven to their end: submitted one after another, each recorded and followed like any
run (submission.py); `rtjob wait` of a pipeline run follows its steps. Where the backend has a supervisor on the
cluster (Ray), it submits the steps and no client needs to stay (supervised.py): a client that follows only attaches to
the steps it submits. Elsewhere steps advance only while a follower runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ...core.errors import BadInput, RtjobError, WaitTimeout
from ...core.model import RunStatus
from ...core.pipeline_status import overall
from ..events import Quiet
from ..lifecycle import storage_check
from ..lifecycle.follow import Abandoned, Detached, EndSeen, Followed, follow_to_end
from ..lifecycle.submission import submit_and_record
from ..memory import find
from ..view import look
from .pipeline import find as find_pipeline
from .pipeline import new_record, record_progress
from .supervised import await_step, recorded_end, start_supervisor, supervisor_now

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo
    from ...core.record import RunRecord
    from ...core.verdict import Verdict
    from ..events import RunEvents
    from .pipeline import PipelinePlan


@dataclass
class StepsOutcome:
    """Each step's status (None: not submitted) and how the last step followed ended (None: none was)."""

    statuses: list[RunStatus | None]
    last: Followed | None = None
    ended: RunStatus | None = None  # as the pipeline's supervisor recorded it (a stop between steps)

    @property
    def unfinished(self) -> bool:
        """The follow ended before the last followed step did (Ctrl-C, the --timeout, an error)."""
        return isinstance(self.last, Detached | Abandoned)

    @property
    def status(self) -> RunStatus:
        return self.ended or overall(self.statuses)


def run_steps(pp: PipelinePlan, events: RunEvents, *, out: TextIO | None, no_wait: bool, timeout_s: float | None,
              stop_on_interrupt: bool) -> StepsOutcome:
    """Run the steps one after another, each followed to its end; stop at the first that does not succeed. Steps
    that already succeeded under this pipeline id are not run again. ``no_wait``: submit the next step only."""
    from ..queued import keeper_sends, refuse_if_never_fits

    for step in pp.steps:  # a queued step that can never fit the cluster grown to its largest: before any write
        if step.plan is not None and keeper_sends(step.plan):
            refuse_if_never_fits(step.plan)
    known = find_pipeline(pp.id, None)
    record = known or new_record(pp)
    if storage_check.wanted(pp.settings):  # once, before anything runs: its steps write below the same root
        storage_check.check(record, events)
    if known is None:
        record_progress(record, [None] * len(pp.steps), events, reopen=True)
    else:
        events.note(f"pipeline run {pp.id} exists: its steps that succeeded are not run again")
        record.steps = [s.to_json() for s in pp.steps]
    deadline = time.monotonic() + timeout_s if timeout_s else None
    done = StepsOutcome([None] * len(pp.steps))
    succeeded = [s.plan is None or _succeeded(find(s.run_id)) for s in pp.steps]
    supervisor = start_supervisor(pp, [s for s, ok in zip(pp.steps, succeeded, strict=True) if not ok], events)
    if supervisor is not None and pp.backend.pipeline_steps_inside:  # the steps are not the backend's jobs
        done.statuses = [RunStatus.SUCCEEDED if ok else None for ok in succeeded]
        if no_wait:
            events.note(f"pipeline {pp.id}: its steps run inside {supervisor.id}; rtjob wait {pp.id} follows them")
        else:
            done.statuses, done.ended = follow_inside(pp.backend, record, pp.storage_root, events,
                                                      deadline)
        record_progress(record, done.statuses, events, done.ended, reopen=True)
        return done
    for i, step in enumerate(pp.steps):
        if succeeded[i] or step.plan is None:
            where = f"of pipeline run {step.reused_from}" if step.plan is None else "already"
            events.note(f"step {i + 1}/{len(pp.steps)} {step.name}: {step.run_id} {where} SUCCEEDED; not run again")
            done.statuses[i] = RunStatus.SUCCEEDED
            continue
        if supervisor is not None and no_wait:
            events.note(f"pipeline {pp.id}: its supervisor runs the steps on the cluster; rtjob wait {pp.id} "
                        "follows them")
            break
        if supervisor is not None and step.plan.job.queue is not None and not pp.backend.queues_itself:
            events.note(f"step {i + 1}/{len(pp.steps)} {step.name}: {step.run_id} waits in queue "
                        f"{step.plan.job.queue.name} until its keeper admits it (rtjob queue {step.plan.job.queue.name})")
        if supervisor is not None and await_step(pp.backend, pp.id, step.run_id, deadline) is None:
            done.ended = recorded_end(pp.backend, record, deadline)  # the supervisor ended it before this step
            break
        events.note(f"step {i + 1}/{len(pp.steps)} {step.name}: {step.run_id}")
        # Attaches to the supervisor's submit; the storage was checked above, once for the pipeline.
        submit_and_record(step.plan, attach=True, events=events, check_storage=False)
        done.statuses[i] = RunStatus.RUNNING
        record_progress(record, done.statuses, events, reopen=True)
        if no_wait:
            events.note(f"pipeline {pp.id}: steps advance only while rtjob follows them; to go on: rtjob submit "
                        f"{pp.pipeline.shown} --submission-id {pp.id}")
            break
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            done.last = Abandoned(step.run_id, WaitTimeout(
                f"pipeline {pp.id} is still running after the --timeout (step {step.name}, run {step.run_id}, "
                "left running)"))
            return done
        done.last = follow_to_end(pp.backend, step.run_id, out=out, timeout_s=left,
                                  stop_on_interrupt=stop_on_interrupt, events=events, request=step.plan.request)
        if isinstance(done.last, Abandoned):  # the follow ended on an error: the step's status as last seen
            if done.last.run is not None:
                done.statuses[i] = done.last.run.status
            record_progress(record, done.statuses, events, reopen=True)
            return done
        if isinstance(done.last, Detached):  # the step keeps running
            events.note(f"pipeline {pp.id} paused at step {step.name}; to go on: rtjob submit {pp.pipeline.shown} "
                        f"--submission-id {pp.id}")
            return done
        done.statuses[i] = done.last.run.status
        record_progress(record, done.statuses, events, reopen=True)
        if done.last.run.status != RunStatus.SUCCEEDED:
            later = pp.pipeline.step_names()[i:]
            events.note(f"pipeline {pp.id} stopped at step {step.name} ({done.last.run.status.value}); after a "
                        f"fix: rtjob submit {pp.pipeline.shown} --from {later[0]} {pp.id}")
            break
    record_progress(record, done.statuses, events, done.ended, reopen=True)
    return done


def follow_inside(be: Backend, record: RunRecord, storage_root: str | None, events: RunEvents,
                  deadline: float | None) -> tuple[list[RunStatus | None], RunStatus | None]:
    """A pipeline whose steps run inside the job hosting its supervisor (Anyscale): that job followed to its end,
    each step's progress as its record in storage says (a line when it changes), then the pipeline's end as the
    supervisor recorded it (None: it recorded none; the steps' statuses decide)."""
    seen: dict[str, RunStatus] = {}
    while True:
        supervisor = be.supervisor_of(record.id)
        steps = step_infos(be, record, storage_root)
        for n, (step, info) in enumerate(steps, 1):
            if info is not None and seen.get(info.id) != info.status:
                seen[info.id] = info.status
                events.note(f"step {n}/{len(steps)} {step.get('name')}: {info.id} {info.status.value} "
                            f"(rtjob logs {info.id})")
        if supervisor is None or supervisor.status.terminal or _client_recorded_the_stop(record):
            break
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeout(f"pipeline {record.id} is still running after the --timeout (its job {supervisor.id} "
                              "goes on)")
        time.sleep(INSIDE_POLL_S)
    statuses = [info.status if info else None for _, info in steps]
    if supervisor is not None and not supervisor.status.terminal:  # its job still stopping: the client's end
        return statuses, RunStatus.STOPPED
    ended = recorded_end(be, record, deadline)
    if ended is None and supervisor is not None and not overall(statuses).terminal:
        events.warning(f"{supervisor.id} ended {supervisor.status.value} without recording the pipeline's end: "
                       f"{supervisor.message or ''} (rtjob logs {supervisor.id})")
        ended = RunStatus.FAILED if supervisor.status != RunStatus.STOPPED else RunStatus.STOPPED
    return statuses, ended


def _client_recorded_the_stop(record: RunRecord) -> bool:
    """A stop that outlasted the pipeline's supervisor: the client that stopped it recorded the pipeline STOPPED
    (runs/lifecycle/stopping.py) while its job may still be stopping."""
    from ...core.lifecycle import Writer
    from ..memory import stored_record

    stored = stored_record(record)
    return stored is not None and stored.run_status == RunStatus.STOPPED \
        and stored.completed_by == Writer.FOLLOWER.recorded_as


INSIDE_POLL_S = 5.0  # the job hosting the steps is read at most this often (and each step's record)


def _succeeded(record: RunRecord | None) -> bool:
    return record is not None and record.run_status == RunStatus.SUCCEEDED


def step_infos(be: Backend, record: RunRecord,
               storage_root: str | None) -> list[tuple[dict[str, Any], RunInfo | None]]:
    """Each step of a pipeline run as its backend (else its record) reports it; None: not submitted (yet)."""
    out: list[tuple[dict[str, Any], RunInfo | None]] = []
    for step in record.steps:
        folder = str(step.get("storage_uri") or "")  # <root>/<job>/<run id>: its record is found there first
        root = folder.rsplit("/", 2)[0] if folder.count("/") >= 2 else storage_root
        try:  # a step that was retried: one run, its latest attempt's status (runs/view.py)
            info: RunInfo | None = look(be, str(step.get("run_id")), root, Quiet()).info
        except RtjobError:
            info = None
        out.append((step, info))
    return out


def pipeline_state(be: Backend, record: RunRecord, storage_root: str | None, *,
                   carry: bool = False) -> tuple[list[tuple[dict[str, Any], RunInfo | None]], Verdict]:
    """`rtjob status`, `wait` and `stop` of PIPELINE_ID: each step as its backend reports it, and the pipeline run's
    verdict (its status, line, times, duration: core/pipeline_verdict.pipeline_verdict, as `show`, `runs` and the UI
    say it). A pipeline whose end is recorded (by its supervisor or a client) is as recorded, its steps too.
    ``carry`` (`stop`, `status --repair`): the status seen is written to the pipeline's record; a read writes
    nothing."""
    from ...core.pipeline_verdict import pipeline_verdict
    from ..memory import with_run_side

    ended_record = with_run_side(record)
    if ended_record.run_status.terminal:  # that end stands, its steps as recorded (the supervisor's step ids)
        steps = step_infos(be, ended_record, storage_root)
        return steps, pipeline_verdict(ended_record, [(str(step.get("name")), info) for step, info in steps])
    steps = step_infos(be, record, storage_root)
    statuses = [info.status if info else None for _, info in steps]
    ended = recorded_end(be, record, time.monotonic()) if not overall(statuses).terminal else None
    if carry:  # written: what its supervisor wrote since (its end, its times) is read again to join the ledger's
        record_progress(record, statuses, Quiet(), ended)
    record = with_run_side(record) if carry else ended_record  # a read: the storage read above serves
    # An end recorded stands: a stop that outlasted its supervisor was ended by the client that stopped it.
    return steps, pipeline_verdict(record, [(str(step.get("name")), info) for step, info in steps], ended=ended)


def wait_steps(be: Backend, record: RunRecord, storage_root: str | None, events: RunEvents,
               timeout_s: float | None) -> tuple[list[dict[str, Any]], StepsOutcome]:
    """`rtjob wait PIPELINE_ID`: follow each submitted step that has not ended, in order, to the pipeline run's
    outcome. A step its supervisor has not submitted yet is waited for; without a supervisor, a next step never
    submitted is bad input (exit 2)."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    supervisor = supervisor_now(be, record.id)
    if supervisor is not None and be.pipeline_steps_inside:
        statuses, ended = follow_inside(be, record, storage_root, events, deadline)
        record_progress(record, statuses, events, ended)
        return list(record.steps), StepsOutcome(statuses, ended=ended)
    steps = step_infos(be, record, storage_root)
    done = StepsOutcome([info.status if info else None for _, info in steps])
    for i, (step, info) in enumerate(steps):
        if info is None and supervisor is not None and overall(done.statuses[:i]) != RunStatus.FAILED:
            info = await_step(be, record.id, str(step.get("run_id")), deadline)
            if info is None:
                break
        if info is None or info.status.terminal:
            done.statuses[i] = info.status if info else None
            continue
        left = None if deadline is None else max(0.001, deadline - time.monotonic())
        done.last = follow_to_end(be, info.id, out=None, timeout_s=left, stop_on_interrupt=False, events=events)
        if not isinstance(done.last, EndSeen):
            return [s for s, _ in steps], done
        done.statuses[i] = done.last.run.status
    if supervisor is not None and not overall(done.statuses).terminal:
        done.ended = recorded_end(be, record, deadline)
    record_progress(record, done.statuses, events, done.ended)
    if not done.status.terminal:
        waiting = next((str(s.get("name")) for (s, _), st in zip(steps, done.statuses, strict=True) if st is None),
                       "?")
        raise BadInput(f"pipeline {record.id}: step {waiting} was never submitted (steps advance only while rtjob "
                       f"follows them): rtjob submit {record.job_file or record.job} --submission-id {record.id}")
    return [s for s, _ in steps], done
