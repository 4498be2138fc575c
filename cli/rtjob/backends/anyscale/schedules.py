"""Anyscale schedules: a ScheduleConfig (plain data) that runs a planned job on a cron expression, and the
Anyscale backend's ``Schedules`` capability (`rtjob schedule ...`).

The values only this client holds (`env:` secrets, forwarded credentials, notify URLs) are taken at apply, as a
job's submit takes them: the schedule's plain data keeps them under SEALED (never printed: ``masked`` names them),
and ``apply`` hands Anyscale the sealed package among the job config's py_modules (backends/sealed_package.py),
which the SDK uploads to the cloud's storage; every job the schedule starts carries its URI, never the values."""

from __future__ import annotations

import contextlib
import copy
import shlex
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.redact import secret_values
from ..capabilities import Schedules
from ..sealed_package import sealed_folder
from .client import anyscale_errors, state_name
from .request import AnyscaleJobRequest, check_with_anyscale, masked_config

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..base import Request
    from .client import SdkAccess

SEALED = "rtjob_sealed"  # a schedule's key (not Anyscale's): {"values", "env", "steps"} its sealed package holds


def _sealing(schedule: dict[str, Any], request: AnyscaleJobRequest) -> dict[str, Any]:
    if request.sealed or request.sealed_env or request.sealed_steps:
        schedule[SEALED] = {"values": dict(request.sealed), "env": dict(request.sealed_env),
                            "steps": list(request.sealed_steps)}
    return schedule


def _sealed_parts(schedule: dict[str, Any]) -> list[dict[str, str]]:
    """Every {name: value} the schedule's sealed package holds (its own values and env, each step's)."""
    sealed = schedule.get(SEALED) or {}
    return [sealed.get("values") or {}, sealed.get("env") or {},
            *(part for step in sealed.get("steps") or [] for part in step.values())]


def schedule_config(request: AnyscaleJobRequest, name: str, cron: str, timezone: str) -> dict[str, Any]:
    """An Anyscale ScheduleConfig (plain data) that runs ``request``'s job on ``cron``.

    Every triggered run is its own Anyscale job with the same config, so the run folder cannot be fixed
    at apply time: the entrypoint names it after the Anyscale job id that Anyscale sets in every job
    (ANYSCALE_HA_JOB_ID; a retry of that job resumes from it), with a UTC timestamp as fallback.
    """
    job = copy.deepcopy(request.config)
    job["name"] = name
    env = job["env_vars"]
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
    return _sealing({"job_config": job, "cron_expression": cron, "timezone": timezone}, request)


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
    return _sealing({"job_config": job, "cron_expression": cron, "timezone": timezone}, request)


def masked_schedule(schedule: dict[str, Any]) -> dict[str, Any]:
    """The ScheduleConfig as printed: masked, its sealed package named among the py_modules (never its values)."""
    plain = {k: v for k, v in schedule.items() if k != SEALED}
    names = sorted({name for part in _sealed_parts(schedule) for name in part})
    return {**plain, "job_config": masked_config(schedule["job_config"], names)}


@contextlib.contextmanager
def sent_schedule(schedule: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ScheduleConfig as applied: its sealed package among the job config's py_modules while the block runs."""
    plain = {k: v for k, v in schedule.items() if k != SEALED}
    sealed = schedule.get(SEALED) or {}
    with sealed_folder(sealed.get("values") or {}, sealed.get("env") or {}, sealed.get("steps") or []) as folder:
        job = plain["job_config"]
        yield plain if folder is None else \
            {**plain, "job_config": {**job, "py_modules": [*(job.get("py_modules") or []), folder]}}


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
        return check_with_anyscale("ScheduleConfig", {k: v for k, v in schedule.items() if k != SEALED}, where)

    def apply(self, schedule: dict[str, Any]) -> str:
        from anyscale.schedule.models import ScheduleConfig

        secrets = [*secret_values((schedule.get("job_config") or {}).get("env_vars") or {}),
                   *(value for part in _sealed_parts(schedule) for value in part.values())]
        name = (schedule.get("job_config") or {}).get("name")
        with sent_schedule(schedule) as sent, anyscale_errors(f"applying schedule {name}", secrets):
            return str(self.backend._sdk("schedule").apply(ScheduleConfig.from_dict(sent)))

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
