"""The entrypoint's environment, as the companion starts it: the job's, with what the run side adds for the
entrypoint and for the Ray workers its `ray.init` starts (through the job config Ray hands the driver,
``RAY_JOB_CONFIG_JSON_ENV_VAR``, whose runtime_env every worker of the run gets)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping

import rtjob_contract as contract

from .outcome import RAY_JOB_CONFIG
from .train_phases import callbacks_env


def child_env(env: Mapping[str, str], run_dir: str | None, input_dir: str | None = None, *,
              setup_hook: str | None = None) -> dict[str, str]:
    """The entrypoint's environment: the job's, with ``RTJOB_RUN_DIR`` the local folder and ``RTJOB_INPUT_DIR``
    the step before's (also in the runtime_env Ray gives the driver's workers, so Ray tasks on this node see them).
    ``setup_hook``: Ray's ``worker_process_setup_hook`` in that runtime_env where it names none, so that `ray.init`
    in the entrypoint gives it to every worker of the run: a submit whose request has no such field (Anyscale's
    JobConfig) still gets the run's secrets to its workers."""
    out = dict(env)
    out.update(callbacks_env(env))  # Ray Train's phases in the timeline, where the job's Ray can say them
    local = {name: value for name, value in ((contract.ENV_RUN_DIR, run_dir), (contract.ENV_INPUT_DIR, input_dir))
             if value}
    out.update(local)
    if not local and not setup_hook:
        return out
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        config = json.loads(out.get(RAY_JOB_CONFIG) or "")
        runtime_env = config.setdefault("runtime_env", {}) or {}
        if local:
            runtime_env.setdefault("env_vars", {}).update(local)
        if setup_hook:  # one the request named (rtjob's on Ray) is kept; the run's name keys what the hook reads
            runtime_env.setdefault("worker_process_setup_hook", setup_hook)
            if out.get(contract.ENV_RUN_NAME):  # a scheduled Anyscale run's is exported by its entrypoint only
                runtime_env.setdefault("env_vars", {}).setdefault(contract.ENV_RUN_NAME, out[contract.ENV_RUN_NAME])
        config["runtime_env"] = runtime_env
        out[RAY_JOB_CONFIG] = json.dumps(config)
    return out
