"""Plan once: a job reference and the settings become one run's exact request (no Click here). Submitting and
following it are in submission.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..backends import get_backend
from ..core.model import RunInfo
from ..core.redact import REDACTOR, secret_arg_values

if TYPE_CHECKING:
    from ..backends.base import Backend, Request, Upload
    from ..jobspec.project import Settings
    from ..jobspec.resolve import JobSource, Overrides, ResolvedJob


@dataclass
class Plan:
    """One run, fully decided and planned: the job, its backend and the exact request (planned once)."""

    backend: Backend
    job: ResolvedJob
    request: Request
    notes: list[str] = field(default_factory=list)
    upload: Upload | None = None  # what the submit uploads from this machine (render shows it)
    # How it was asked for (the run record keeps it: rerun replays it).
    settings: Settings | None = None
    overrides: Overrides | None = None
    storage_flag: str | None = None
    pipeline: str | None = None  # the pipeline run this run is a step of (runs/pipeline.py)


def plan(job_ref: str, settings: Settings, overrides: Overrides, storage_flag: str | None = None,
         source: JobSource | None = None) -> Plan:
    """YAML (or a run record's documents: ``source``) → validated, resolved job → the backend's request. Pure:
    nothing is started or sent."""
    from ..jobspec.resolve import resolve

    backend = get_backend(settings)
    job = resolve(job_ref, settings, overrides, backend.placement(), storage_flag=storage_flag, source=source)
    # Every secret of this run is hunted in whatever is printed from here on (env, args, tags).
    REDACTOR.add_mapping(job.env_vars)
    REDACTOR.add_mapping(job.spec.tags)
    REDACTOR.add(secret_arg_values(job.entrypoint))
    request = backend.plan(job)
    notes = list(job.notes) + [n for n in request.notes if n not in job.notes]
    return Plan(backend, job, request, notes, backend.upload(job), settings, overrides, storage_flag)


@dataclass
class Submitted:
    run: RunInfo
    created: bool  # False: a run with this id existed, and this is an attach
