"""`rtjob sync RUN_ID` on a Ray cluster whose nodes are not this machine: what a node kept of a run (storage/
node_dirs.py's kept folders) is stored by a small Ray job pinned to that node (``entrypoint_resources`` on Ray's
``node:<ip>`` resource), running `python -m rtjob.runside.kept_sync RUN_ID` there with the run's own rtjob modules and
environment (its storage's credentials included), one per node that drove an attempt of the run."""

from __future__ import annotations

from typing import Any

import rtjob_contract as contract

from .request import RayJobRequest

PIN = 0.001  # of the node's own resource: the job runs there and takes nothing from the run's


def is_sync_job(data: dict[str, Any]) -> bool:
    """Whether this Jobs API entry is one of rtjob's sync jobs (hidden from `list` and `runs`)."""
    return ((data.get("metadata") or {}).get(contract.META_ROLE)) == contract.ROLE_SYNC


def driver_node(data: dict[str, Any]) -> str | None:
    """The IP of the node that ran an attempt's entrypoint (where its companion kept its node folder): the host of
    that node's job agent (``driver_agent_http_address``, set for every entrypoint), else the Ray driver's node."""
    from urllib.parse import urlsplit

    agent = data.get("driver_agent_http_address")
    if isinstance(agent, str) and agent:
        host = urlsplit(agent).hostname
        if host:
            return host
    info = data.get("driver_info") or {}
    ip = info.get("node_ip_address") if isinstance(info, dict) else None
    return ip if isinstance(ip, str) and ip else None


def sync_request(run_id: str, attempt: dict[str, Any], node_ip: str, n: int) -> RayJobRequest:
    """The ``n``th sync job of run ``run_id`` on ``node_ip``, from one of its attempts as the Jobs API returns it:
    that attempt's packages (rtjob travels as its py_modules) and environment."""
    sent = dict(attempt.get("runtime_env") or {})
    runtime_env: dict[str, Any] = {key: sent[key] for key in ("working_dir", "py_modules") if sent.get(key)}
    env = {k: str(v) for k, v in (sent.get("env_vars") or {}).items()}
    env.pop(contract.ENV_COMPANION, None)
    runtime_env["env_vars"] = env
    meta = attempt.get("metadata") or {}
    metadata = {contract.META_ROLE: contract.ROLE_SYNC, contract.META_SUPERVISES: run_id}
    for key in (contract.META_JOB, contract.META_STORAGE, contract.META_STORAGE_ENDPOINT):
        if meta.get(key):
            metadata[key] = str(meta[key])
    return RayJobRequest(run_id=f"{run_id}{contract.SYNC_SUFFIX}{n}", job_file=str(meta.get(contract.META_JOB_FILE, "")),
                         notes=[], entrypoint=contract.sync_command(run_id), runtime_env=runtime_env,
                         metadata=metadata, entrypoint_num_cpus=0,
                         entrypoint_resources={f"node:{node_ip}": PIN})
