"""Anyscale schedules: a ScheduleConfig (plain data) that runs a planned job on a cron expression."""

from __future__ import annotations

import copy
from typing import Any

import rtjob_contract as contract

from .request import AnyscaleJobRequest, masked_config


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
    env[contract.ENV_SCHEDULE] = name
    run_name = f'"${{ANYSCALE_HA_JOB_ID:-{name}-$(date -u +%Y%m%d-%H%M%S)}}"'
    exports = f"export {contract.ENV_RUN_NAME}={run_name}; "
    if env.get(contract.ENV_STORAGE_PATH):
        exports += f'export {contract.ENV_RUN_DIR}="${contract.ENV_STORAGE_PATH}/${contract.ENV_RUN_NAME}"; '
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


def masked_schedule(schedule: dict[str, Any]) -> dict[str, Any]:

    return {**schedule, "job_config": masked_config(schedule["job_config"])}
