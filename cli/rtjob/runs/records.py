"""Making a run's record: what ran (the recorded spec, the request as rendered, the shape, the rate), from where
(git) and by whom. Everything in a record is already masked when it is made: it is written to a team's bucket."""

from __future__ import annotations

import getpass
import socket
from typing import TYPE_CHECKING, Any

from ..core import clock
from ..core.gitinfo import git_state  # rerun and pipelines import it from here
from ..core.record import RunRecord, spec_hash
from ..core.redact import mask_url, redact_data

if TYPE_CHECKING:
    from ..core.model import RunInfo
    from .runner import Plan


def now_ms() -> str:
    """The start-up timeline's stamps: core/clock's, to the millisecond (its stages are seconds apart)."""
    return clock.now_iso("milliseconds")


def new_record(planned: Plan, info: RunInfo, timeline: dict[str, str] | None = None) -> RunRecord:
    """The record of a run this process just submitted: everything already masked."""
    from ..jobspec.resolve import Overrides
    from .recorded_spec import record_spec

    job, backend = planned.job, planned.backend
    settings = planned.settings
    values = {k: settings.get(k) for k in ("address", "cloud", "project")} if settings else {}
    spec = record_spec(job, planned.overrides or Overrides(), values)
    cost = planned.cost
    record = RunRecord(
        id=info.id, job=job.spec.name, backend=backend.name,
        storage_uri=job.storage_uri, storage_endpoint=job.storage_endpoint,
        job_file=job.job_file, project_root=str(settings.root) if settings else None,
        working_dir=str(job.working_dir), spec_hash=spec_hash(spec), spec=spec,
        request=redact_data(backend.render(planned.request), []),
        shape={"nodes": job.nodes if job.shape_declared else None,
               "workers": job.num_workers if job.shape_declared else None,
               "resources_per_worker": job.worker_resources() if job.shape_declared else None,
               "compute_config": job.compute_config_name},
        rate=cost.to_json() if cost else None,
        git=git_state(job.working_dir),
        pipeline=planned.pipeline, timeline=dict(timeline or {}), **new_record_identity(),
    )
    record.observe(info)
    record.address = mask_url(backend.address)
    return record


def new_record_identity() -> dict[str, Any]:
    """Who submitted a run, from where, and when: the fields every new record starts with."""
    return {"user": _user(), "host": socket.gethostname(), "submitted_at": clock.now_iso("seconds")}


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
