"""Plan once, attach-or-submit, follow with retries: one run's life as the CLI drives it (no Click here)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from ..backends import get_backend, placement_for
from ..core.errors import WaitTimeout
from ..core.model import RunInfo, RunStatus
from ..core.redact import REDACTOR, secret_arg_values
from .follow import Patience, follow

if TYPE_CHECKING:
    from ..backends.base import Backend, Request, Upload
    from ..jobspec.pricing import HourlyCost
    from ..jobspec.resolve import JobSource, Overrides, ResolvedJob
    from ..jobspec.settings import Settings

Say = Callable[[str], None]


@dataclass
class Plan:
    """One run, fully decided and planned: the job, its backend and the exact request (planned once), with the
    facts measured on the way (the upload, the estimated cost): everything after reads them from here."""

    backend: Backend
    job: ResolvedJob
    request: Request
    notes: list[str] = field(default_factory=list)
    upload: Upload | None = None  # what the submit uploads from this machine (render shows it)
    cost: HourlyCost | None = None  # the estimated hourly cost of the cluster it asks for (None: unknown or free)
    # How it was asked for (the run record keeps it: rerun replays it).
    settings: Settings | None = None
    overrides: Overrides | None = None
    storage_flag: str | None = None
    pipeline: str | None = None  # the pipeline run this run is a step of (runs/pipeline.py)


def plan(job_ref: str, settings: Settings, overrides: Overrides, storage_flag: str | None = None,
         source: JobSource | None = None) -> Plan:
    """YAML (or a run record's documents: ``source``) → validated, resolved job → the backend's request. Pure:
    nothing is started or sent."""
    from ..jobspec.pricing import job_cost
    from ..jobspec.resolve import resolve

    backend = get_backend(settings)
    job = resolve(job_ref, settings, overrides, placement_for(backend), storage_flag=storage_flag, source=source)
    # Every secret of this run is hunted in whatever is printed from here on (env, args, tags).
    REDACTOR.add_mapping(job.env_vars)
    REDACTOR.add_mapping(job.spec.tags)
    REDACTOR.add(secret_arg_values(job.entrypoint))
    cost = job_cost(job)  # once: the request records it, render, submit and the run record show it
    planned = backend.plan(job, cost)
    request = planned.request
    notes = list(job.notes) + [n for n in request.notes if n not in job.notes]
    return Plan(backend, job, request, notes, planned.upload, cost, settings, overrides, storage_flag)


@dataclass
class Submitted:
    run: RunInfo
    created: bool  # False: a run with this id existed, and this is an attach


def submit(planned: Plan, *, attach: bool, say: Say) -> Submitted:
    """Make the backend ready (the embedded cluster starts here), attach to the run if ``attach`` and it
    exists, else check that the job can fit and submit the planned request."""
    backend = planned.backend
    backend.prepare(planned.job, say)
    # Faults that may pass are waited out here too: the existence check makes a repeated submit an attach.
    patience = Patience(say)
    existing = patience.call_sync(lambda: backend.find(planned.job.run_id)) if attach else None
    if existing is not None:
        return Submitted(existing, created=False)
    for warning in patience.call_sync(lambda: backend.precheck(planned.job)):
        say(f"warning: {warning}")
    if planned.upload is not None:
        say(f"uploading working dir {planned.upload.describe()}")
    result = patience.call_sync(lambda: backend.submit(planned.request))
    return Submitted(result.run, result.created)


def follow_run(
    backend: Backend,
    run_id: str,
    *,
    out: TextIO | None,
    timeout_s: float | None,
    on_status: Callable[[RunInfo], None] | None,
    say: Say,
    request: Request | None = None,
) -> RunInfo:
    """Follow ``run_id`` (its latest attempt, if it was retried already) until it ends; a FAILED run that
    the backend retries is followed into its next attempt. The outcome comes from the run's status."""
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

    patience = Patience(say)
    known = patience.call_sync(lambda: backend.attempts(run_id))
    if known is not None and known.chain and known.chain[-1].id != run_id and any(a.id == run_id for a in known.chain):
        current = known.chain[-1].id
        say(f"{run_id} was retried: following attempt {known.chain[-1].attempt} ({current})")
    while True:
        info = follow(backend, current, out=out, timeout_s=remaining(), on_status=on_status, notice=say)
        if info.status != RunStatus.FAILED:
            return info
        decision = patience.call_sync(functools.partial(backend.retry, current, request))
        if decision is None or decision.reason is None:
            return info
        if decision.next_run is None:
            if decision.max_retries:
                say(f"{current} FAILED: {decision.reason}; no retries left (max_retries {decision.max_retries})")
            return info
        verb = "submitted" if decision.created else "attaching to"
        say(f"{current} FAILED: {decision.reason}; retry {decision.attempt}/{decision.max_retries}: {verb} "
            f"{decision.next_run.id} (same run name and storage: training resumes from its last checkpoint)")
        current = decision.next_run.id
