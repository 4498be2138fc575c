"""Plan once: a job reference and the settings become one run's exact request (no Click here). Submitting and
following it are in submission.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..backends import get_backend, placement_for
from ..core.model import RunInfo
from ..core.redact import REDACTOR, secret_arg_values

if TYPE_CHECKING:
    from ..backends.base import Backend, Request, Upload
    from ..jobspec.pricing import HourlyCost
    from ..jobspec.resolve import JobSource, Overrides, ResolvedJob
    from ..jobspec.settings import Settings


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
    pipeline: str | None = None  # the pipeline run this run is a step of (runs/pipelines/pipeline.py)


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
    timeline: dict[str, str] = field(default_factory=dict)  # the client's stages: submitted, accepted
