"""A run's central use case: submit and record it (every submit, rerun and pipeline step alike), then follow it
to its end (Ctrl-C stops or detaches, a FAILED attempt the backend retries is followed into the next one, and
the end is recorded and archived). No Click: what happens is told through RunEvents."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from ...core import lifecycle
from ...core.errors import RtjobError, WaitTimeout
from ...core.model import RunInfo, RunStatus
from ..events import stop_begins
from ..memory import find, ledger, save
from ..records import new_record, now_ms
from ..runner import Submitted
from .archive import observe
from .follow import follow
from .patience import Patience
from .retry_notice import notify_retrying
from .stopping import stop_run
from .stuck_watch import NeverFits

if TYPE_CHECKING:
    from ...backends.base import Backend, Request
    from ...core.record import RunRecord
    from ..events import RunEvents
    from ..runner import Plan


def submit(planned: Plan, *, attach: bool, events: RunEvents) -> Submitted:
    """Make the backend ready (the embedded cluster starts here), attach to the run if ``attach`` and it
    exists, else check that the job can fit and submit the planned request."""
    backend = planned.backend
    backend.prepare(planned.job, events.note)
    # Faults that may pass are waited out here too: the existence check makes a repeated submit an attach.
    patience = Patience(events.note)
    existing = patience.call_sync(lambda: backend.find(planned.job.run_id)) if attach else None
    if existing is not None:
        _supervise(backend, existing, events)
        return Submitted(existing, created=False)
    for warning in patience.call_sync(lambda: backend.precheck(planned.job)):
        events.warning(warning)
    if planned.upload is not None:
        events.note(f"uploading working dir {planned.upload.describe()}")
    sent = now_ms()  # the start-up timeline's first stages: sent (the upload follows), accepted
    result = patience.call_sync(lambda: backend.submit(planned.request))
    accepted = now_ms()
    _supervise(backend, result.run, events)
    return Submitted(result.run, result.created, {"submitted": sent, "accepted": accepted} if result.created else {})


def _supervise(backend: Backend, run: RunInfo, events: RunEvents) -> None:
    """The run's supervisor on the cluster (where the backend has one and the run needs it: retries), started or
    attached to; one warning if it cannot be, and the run goes on (a follower still retries it)."""
    if run.status.terminal:
        return
    try:
        supervisor = Patience(events.note).call_sync(lambda: backend.supervise(run.id))
    except RtjobError as exc:
        events.warning(f"no supervisor for {run.id} ({exc}): its retries happen only while rtjob follows it")
        return
    if supervisor is not None:
        events.note(f"supervisor {supervisor.id} carries the run's retries on the cluster")


def follow_run(
    backend: Backend,
    run_id: str,
    *,
    out: TextIO | None,
    timeout_s: float | None,
    events: RunEvents,
    request: Request | None = None,
    seen: Callable[[RunInfo], None] | None = None,
) -> RunInfo:
    """Follow ``run_id`` (its latest attempt, if it was retried already) until it ends; a FAILED run that
    the backend retries is followed into its next attempt. The outcome comes from the run's status; ``seen``
    hears each status read that changed."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    current = run_id

    def remaining() -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"run {current} is still running after the --timeout; it was left running "
                              f"(rtjob wait {current} to keep waiting, rtjob stop {current} to stop it)")
        return left

    patience = Patience(events.note)
    known = patience.call_sync(lambda: backend.attempts(run_id))
    if known is not None and known.chain and known.chain[-1].id != run_id and any(a.id == run_id for a in known.chain):
        current = known.chain[-1].id
        events.note(f"{run_id} was retried: following attempt {known.chain[-1].attempt} ({current})")
    while True:
        info = follow(backend, current, out=out, timeout_s=remaining(), on_status=_not_ended(events, seen),
                      notice=events.note)
        if info.status != RunStatus.FAILED:
            return info
        decision = patience.call_sync(functools.partial(backend.retry, current, request))
        if decision is None or decision.reason is None:
            return info
        if decision.next_run is None:
            if decision.max_retries:
                events.note(f"{current} FAILED: {decision.reason}; no retries left (max_retries {decision.max_retries})")
            return info
        events.retrying(current, decision)
        if decision.created:  # this process submitted it: it tells the run's notify targets
            notify_retrying(run_id, decision, events)
        current = decision.next_run.id


def _not_ended(events: RunEvents, seen: Callable[[RunInfo], None] | None) -> Callable[[RunInfo], None]:
    """follow's status callback: a change worth telling, until the run ends (its end is the caller's to tell)."""
    def heard(info: RunInfo) -> None:
        if seen is not None:
            seen(info)
        if not info.status.terminal:
            events.status(info)
    return heard


def submit_and_record(planned: Plan, *, attach: bool, events: RunEvents) -> Submitted:
    """Submit the planned run (or attach to it: ``attach`` and its id exists), record it in the ledger and its
    storage (the run outlives its cluster), and tell ``events.submitted``."""
    done = submit(planned, attach=attach, events=events)
    _record(planned, done.run, events, done.timeline)
    events.submitted(planned, done)
    return done


def _record(planned: Plan, info: RunInfo, events: RunEvents, timeline: dict[str, str]) -> None:
    """A new record, unless this ledger already holds the submitter's own (an attach): that one is observed."""
    book = ledger()
    try:
        known = book.get(info.id)
    except RtjobError as exc:
        events.warning(f"run ledger not read: {exc.message}")
        known = None
    if known is not None and known.spec is not None:
        observe(planned.backend, info, events)
        return
    save(lifecycle.submitted(new_record(planned, info, timeline)), events)


@dataclass
class Ended:
    """The followed run ended (``stopped``: by this follower, on Ctrl-C with stop-on-interrupt)."""

    run: RunInfo
    stopped: bool = False


@dataclass
class Detached:
    """Ctrl-C without stop-on-interrupt: the run keeps running (``run``: as last seen, if it was)."""

    run_id: str
    run: RunInfo | None = field(default=None, compare=False)


@dataclass
class Abandoned:
    """rtjob stopped following before the run's end (``error``: the --timeout, a cluster that could not be reached,
    a run stopped because it waits in vain); ``run`` is the run as last seen, if it was."""

    run_id: str
    error: RtjobError
    run: RunInfo | None = None


Followed = Ended | Detached | Abandoned


def follow_to_end(backend: Backend, run_id: str, *, out: TextIO | None, timeout_s: float | None,
                  stop_on_interrupt: bool, events: RunEvents, request: Request | None = None) -> Followed:
    """Follow the run (its log to ``out`` unless None) through its retries until it ends, then record and archive
    its end. Ctrl-C stops it (``stop_on_interrupt``) or leaves it running. An error that ends the follow (the
    --timeout, a lost cluster, a run that waits in vain) is returned, with the run as last seen: whoever prints
    the outcome still has the run to show."""
    last: list[RunInfo] = []
    try:
        info = follow_run(backend, run_id, out=out, timeout_s=timeout_s, events=events, request=request,
                          seen=last.append)
    except NeverFits as exc:  # stopped by the follower: recorded as the stop left it
        observe(backend, exc.run, events, run_id=run_id)
        return Abandoned(run_id, exc, exc.run)
    except RtjobError as exc:
        return Abandoned(run_id, exc, last[-1] if last else None)
    except KeyboardInterrupt:
        if not stop_on_interrupt:
            events.detached(run_id)
            return Detached(run_id, last[-1] if last else None)
        events.note(stop_begins(run_id, "interrupted"))
        info = stop_run(backend, run_id)
        events.note(f"{run_id}: {info.status.value}")
        observe(backend, info, events, run_id=run_id)
        return Ended(info, stopped=True)
    record = observe(backend, info, events, run_id=run_id)  # into the ledger; an ended run's record, logs archived
    events.ended(info)
    if info.status == RunStatus.FAILED:
        hint = diagnose(backend, info, record)
        if hint is not None:
            events.note(hint)
    return Ended(info)


DIAGNOSED_LINES = 200  # the end of a failed run's log, where Python's last traceback is


def diagnose(backend: Backend, info: RunInfo, record: RunRecord | None) -> str | None:
    """What a FAILED run's log plainly says went wrong (a missing module: which job file, and step, to declare it
    in), as one line; None when it says nothing rtjob can act on or cannot be read."""
    from .diagnosis import missing_module_hint

    try:
        text = backend.last_lines(info.id, DIAGNOSED_LINES)
    except RtjobError:
        return None
    step = None
    if record is not None and record.pipeline:  # a step's run: the step is named in its pipeline run's record
        try:
            pipeline = find(record.pipeline)
        except RtjobError:
            pipeline = None
        step = next((str(s.get("name")) for s in (pipeline.steps if pipeline else [])
                     if s.get("run_id") == record.id), None)
    return missing_module_hint(text, record.job_file if record else None, step)
