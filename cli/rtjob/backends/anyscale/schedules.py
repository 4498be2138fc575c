"""Anyscale schedules: a ScheduleConfig (plain data) that runs a planned job on a cron expression, and the
Anyscale backend's ``Schedules`` capability (`rtjob schedule ...`)."""

from __future__ import annotations

import copy
import shlex
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.redact import secret_values
from ..capabilities import Schedules
from .client import anyscale_errors, state_name
from .request import AnyscaleJobRequest, check_with_anyscale, masked_config, refuse_sealed

if TYPE_CHECKING:
    from ..base import Request
    from .client import SdkAccess


def schedule_config(request: AnyscaleJobRequest, name: str, cron: str, timezone: str) -> dict[str, Any]:
    """An Anyscale ScheduleConfig (plain data) that runs ``request``'s job on ``cron``.

    Every triggered run is its own Anyscale job with the same config, so the run folder cannot be fixed
    at apply time: the entrypoint names it after the Anyscale job id that Anyscale sets in every job
    (ANYSCALE_HA_JOB_ID; a retry of that job resumes from it), with a UTC timestamp as fallback.
    """
    job = copy.deepcopy(request.config)
    job["name"] = name
    env = job["env_vars"]
    env.update(refuse_sealed(request, "a schedule"))  # each triggered job starts with no rtjob submit to seal them
    env.pop(contract.ENV_RUN_NAME, None)
    env.pop(contract.ENV_RUN_DIR, None)
    env.pop(contract.ENV_RUN_URI, None)
    env[contract.ENV_SCHEDULE] = name
    run_name = f'"${{ANYSCALE_HA_JOB_ID:-{name}-$(date -u +%Y%m%d-%H%M%S)}}"'
    exports = f"export {contract.ENV_RUN_NAME}={run_name}; "
    if env.get(contract.ENV_STORAGE_PATH):
        exports += f'export {contract.ENV_RUN_DIR}="${contract.ENV_STORAGE_PATH}/${contract.ENV_RUN_NAME}"; '
        exports += f'export {contract.ENV_RUN_URI}="${contract.ENV_RUN_DIR}"; '  # the companion syncs to it
    job["entrypoint"] = exports + job["entrypoint"]
    tags = dict(job.get("tags") or {})
    tags.pop(contract.TAG_RUN_ID, None)
    tags[contract.TAG_SCHEDULE] = name
    if env.get(contract.ENV_STORAGE_PATH):
        tags[contract.TAG_STORAGE] = env[contract.ENV_STORAGE_PATH]
    else:
        tags.pop(contract.TAG_STORAGE, None)
    job["tags"] = tags
    return {"job_config": job, "cron_expression": cron, "timezone": timezone}


def pipeline_schedule_config(request: AnyscaleJobRequest, planned_id: str, name: str, cron: str,
                             timezone: str) -> dict[str, Any]:
    """An Anyscale ScheduleConfig that runs the pipeline job ``request`` (planned under ``planned_id``) on ``cron``:
    each triggered job's supervisor runs it as pipeline ANYSCALE_HA_JOB_ID (a retry of that job resumes it), its
    steps as <that id>-<step>, its folders named after it (RTJOB_PLANNED_ID: the id to replace)."""
    job = copy.deepcopy(request.config)
    job["name"] = name
    env = job["env_vars"]
    env[contract.ENV_SCHEDULE] = name
    env[contract.ENV_PLANNED_ID] = planned_id
    run_id = f'"${{ANYSCALE_HA_JOB_ID:-{name}-$(date -u +%Y%m%d-%H%M%S)}}"'
    # The pipeline job's own supervisor command (contract.supervisor_command), its id the triggered job's.
    job["entrypoint"] = (f"export {contract.ENV_PIPELINE_ID}={run_id}; " + str(job["entrypoint"]).replace(
        f" {shlex.quote(planned_id)} ", f' "${contract.ENV_PIPELINE_ID}" ', 1))
    tags = {k: v for k, v in (job.get("tags") or {}).items()
            if k not in (contract.TAG_RUN_ID, contract.TAG_SUPERVISES, contract.TAG_STORAGE)}
    tags[contract.TAG_SCHEDULE] = name
    job["tags"] = tags
    return {"job_config": job, "cron_expression": cron, "timezone": timezone}


def masked_schedule(schedule: dict[str, Any]) -> dict[str, Any]:
    return {**schedule, "job_config": masked_config(schedule["job_config"])}


class AnyscaleSchedules(Schedules):
    def __init__(self, backend: SdkAccess) -> None:
        self.backend = backend

    def build(self, request: Request, name: str, cron: str, timezone: str) -> dict[str, Any]:
        assert isinstance(request, AnyscaleJobRequest)  # planned by this backend
        return schedule_config(request, name, cron, timezone)

    def build_pipeline(self, planned_id: str, storage_uri: str | None, job: str, requests: list[Request], name: str,
                       cron: str, timezone: str) -> dict[str, Any]:
        from .pipeline import pipeline_request

        request = pipeline_request(planned_id, storage_uri, job, [r for r in requests
                                                                   if isinstance(r, AnyscaleJobRequest)],
                                   str(self.backend.supervisor_backend))
        return pipeline_schedule_config(request, planned_id, name, cron, timezone)

    def masked(self, schedule: dict[str, Any]) -> dict[str, Any]:
        return masked_schedule(schedule)

    def check(self, schedule: dict[str, Any], where: str) -> str | None:
        return check_with_anyscale("ScheduleConfig", schedule, where)

    def apply(self, schedule: dict[str, Any]) -> str:
        from anyscale.schedule.models import ScheduleConfig

        secrets = secret_values((schedule.get("job_config") or {}).get("env_vars") or {})
        name = (schedule.get("job_config") or {}).get("name")
        with anyscale_errors(f"applying schedule {name}", secrets):
            return str(self.backend._sdk("schedule").apply(ScheduleConfig.from_dict(schedule)))

    def list(self) -> list[dict[str, Any]]:
        with self.backend._errors("listing schedules"):
            found = list(self.backend._sdk("schedule").list(max_items=100))
        out = []
        for s in found:
            job_config = s.config.job_config
            env = dict(getattr(job_config, "env_vars", None) or {})
            out.append({
                "id": s.id,
                "name": s.name,
                "state": state_name(s.state),
                "cron": s.config.cron_expression,
                "timezone": s.config.timezone,
                "job": env.get(contract.ENV_JOB_NAME),
            })
        return sorted(out, key=lambda row: row["name"])

    def set_state(self, name: str, enabled: bool) -> str:
        from anyscale.schedule.models import ScheduleState

        state = ScheduleState.ENABLED if enabled else ScheduleState.DISABLED
        with self.backend._errors(f"{'resuming' if enabled else 'pausing'} schedule {name}"):
            return str(self.backend._sdk("schedule").set_state(name=name, state=state))

    def trigger(self, name: str) -> str:
        with self.backend._errors(f"triggering schedule {name}"):
            return str(self.backend._sdk("schedule").trigger(name=name))

    def delete(self, name: str) -> str:
        with self.backend._errors(f"deleting schedule {name}"):
            return str(self.backend._sdk("schedule").delete(name=name))
