"""A Ray job as the Jobs API returns it (``GET /api/jobs/<id>``) read as rtjob's RunInfo: the one conversion the
backend (status, list, find) and the supervisor on the cluster (a retry it submitted) share. Imports at module level:
the stdlib, rtjob_contract and rtjob.core (the cluster runs it)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import rtjob_contract as contract

from ...core.model import RunInfo, RunStatus, iso_time
from ...core.redact import secret_arg_values, secret_values
from .request import time_limit_message


def run_info(data: dict[str, Any], address: str, backend: str = "ray") -> RunInfo:
    """The run ``data`` describes, on the cluster at ``address``, as the backend ``backend`` reports it."""
    meta = data.get("metadata") or {}
    rate: dict[str, Any] | None = None
    with contextlib.suppress(TypeError, ValueError):
        loaded = json.loads(meta.get(contract.META_RATE) or "null")
        rate = loaded if isinstance(loaded, dict) else None
    try:
        status = RunStatus(data.get("status", "UNKNOWN"))
    except ValueError:
        status = RunStatus.UNKNOWN
    env = ((data.get("runtime_env") or {}).get("env_vars")) or {}
    return RunInfo(
        id=data.get("submission_id") or data.get("job_id") or "",
        job=meta.get(contract.META_JOB),
        backend=backend,
        status=status,
        start_time=iso_time(data.get("start_time")),
        end_time=iso_time(data.get("end_time")),
        storage_uri=meta.get(contract.META_STORAGE),
        storage_endpoint=meta.get(contract.META_STORAGE_ENDPOINT),
        exit_code=data.get("driver_exit_code"),
        message=time_limit_message(data) or data.get("message"),
        address=address,
        entrypoint=data.get("entrypoint"),
        secrets=secret_values(env) + secret_arg_values(str(data.get("entrypoint") or "")),
        rate=rate,
        parent=meta.get(contract.META_PARENT) or None,
    )
