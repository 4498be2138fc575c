"""A supervisor as a Ray job (the loop it runs: runside/supervisor/loop.py, on in_cluster.RayClusterJobs): its ids,
the request a client sends to start one for a run or a pipeline, and the rule that replaces a dead one (at most
MAX_REPLACEMENTS times, for runs and pipelines alike).

A run's supervisor is ``<run id>-supervisor`` (0 CPUs, on the head node): its runtime_env holds the run's uploaded
packages' ``gcs://`` URIs (working_dir and py_modules, so Ray keeps them while it lives and a retry finds its code;
rtjob itself is among the py_modules, so ``python -m rtjob.runside.supervisor`` runs from them), the run's env (its
storage and credentials), the dashboard's address; no pip. A pipeline's holds every step's complete request as JSON
(RTJOB_PIPELINE_STEPS) and references every step's packages.

Imports at module level: the stdlib, rtjob_contract and requests (the cluster runs it)."""

from __future__ import annotations

import json
from typing import Any

import rtjob_contract as contract

from ...core.lifecycle import ENDS
from ...core.model import SubmitResult
from ...core.retry_rule import retries_left
from ..request import STEP_ONLY_ENV
from .client import RayJobsAPI
from .request import RayJobRequest
from .retries import RayRetries, attempt_of, max_retries_of, retry_reason

TERMINAL = ENDS  # the kernel's ends, as the Jobs API spells them

# A supervisor that died (its node lost, a kill) is replaced by the next client that carries the run or pipeline:
# the replacements' ids are deterministic (<id>-supervisor-2, -3, ...), so two clients start one. After
# MAX_REPLACEMENTS replacements died too, one more is started only to give the run (or pipeline) up: FAILED, one
# line why: something kills supervisors on this cluster, and another would die the same way.
MAX_REPLACEMENTS = 3
GIVING_UP = MAX_REPLACEMENTS + 2  # the number of the supervisor that gives up (none comes after it)
MAX_SUPERVISORS = 20  # how far ids are probed (runs of an older rtjob were replaced up to 20 times)


def gives_up(n: int) -> bool:
    """Whether the ``n``th supervisor is the one that gives its run or pipeline up (no later one is started)."""
    return n >= GIVING_UP


def given_up_line(run_id: str, n: int, what: str = "run") -> str:
    """Why the ``n``th supervisor gave ``what`` up, as its record says it."""
    return (f"its supervisor died {n - 1} times ({supervisor_id(run_id, n - 1)} was the last): rtjob gave the "
            f"{what} up after {MAX_REPLACEMENTS} replacements")


def supervisor_id(run_id: str, n: int = 1) -> str:
    return f"{run_id}{contract.SUPERVISOR_SUFFIX}" + (f"-{n}" if n > 1 else "")


def supervisor_number(data: dict[str, Any]) -> int:
    """A supervisor's number from its id (``<run id>-supervisor``: 1, ``-supervisor-N``: N)."""
    tail = str(data.get("submission_id") or "").rsplit(contract.SUPERVISOR_SUFFIX, 1)[-1]
    return int(tail[1:]) if tail.startswith("-") and tail[1:].isdigit() else 1


def latest_supervisor(api: RayJobsAPI, run_id: str) -> tuple[int, dict[str, Any] | None]:
    """The run's (or pipeline's) latest supervisor: its number and the Jobs API's dict; (0, None): none."""
    found: tuple[int, dict[str, Any] | None] = (0, None)
    for n in range(1, MAX_SUPERVISORS + 1):
        data = api.job(supervisor_id(run_id, n))
        if data is None or not is_supervisor(data) or (data.get("metadata") or {}).get(contract.META_SUPERVISES) != run_id:
            break
        found = (n, data)
    return found


def is_supervisor(data: dict[str, Any]) -> bool:
    """Whether this Jobs API entry is a run's supervisor (hidden from `list` and `runs`)."""
    return ((data.get("metadata") or {}).get(contract.META_ROLE)) == contract.ROLE_SUPERVISOR


def wants_supervisor(data: dict[str, Any]) -> bool:
    """Whether the run (the Jobs API's dict) has something for a supervisor of its own to carry: retries (a
    pipeline's step has its pipeline's supervisor)."""
    step = ((data.get("runtime_env") or {}).get("env_vars") or {}).get(contract.ENV_PIPELINE_ID)
    return max_retries_of(data) > 0 and not is_supervisor(data) and not step


def needs_new_supervisor(api: RayJobsAPI, run_id: str, latest: dict[str, Any] | None) -> bool:
    """Whether the run (root id ``run_id``) has something left to carry and no live supervisor carries it: its
    latest attempt runs, or ended in a way the rule retries with retries left (the supervisor died before it
    submitted the retry)."""
    if latest is not None and latest.get("status") not in TERMINAL:
        return False
    if latest is not None and gives_up(supervisor_number(latest)):  # it gave the run up: nothing to carry
        return False
    chain = RayRetries(api, no_submit).chain_of(run_id)
    if not chain:
        return False
    last = api.job(chain[-1].id) or {}
    if last.get("status") not in TERMINAL:
        return True
    return retry_reason(last) is not None and retries_left(attempt_of(last), max_retries_of(last))


def no_submit(request: RayJobRequest) -> SubmitResult:
    raise AssertionError(f"reading a run's attempts never submits ({request.run_id})")


def missing_packages(api: RayJobsAPI, runtime_env: dict[str, Any]) -> list[str]:
    """The uploaded packages (gcs:// URIs) of ``runtime_env`` the cluster no longer has."""
    uris = [runtime_env.get("working_dir"), *(runtime_env.get("py_modules") or [])]
    return [uri for uri in uris if isinstance(uri, str) and uri.startswith("gcs://")
            and api.request("GET", f"/api/packages/gcs/{uri[len('gcs://'):]}").status_code != 200]


def supervisor_request(data: dict[str, Any], dashboard: str, n: int = 1, backend: str = "ray") -> RayJobRequest:
    """The ``n``th supervisor's request for the run ``data`` (as the Jobs API returns it after its submit),
    reaching the Jobs API at ``dashboard`` from inside the cluster; ``backend``: the registered backend whose loop
    it runs (Backend.supervisor_backend)."""
    run_id = str(data.get("submission_id"))
    sent = dict(data.get("runtime_env") or {})
    runtime_env: dict[str, Any] = {}
    # The same package URIs as the run: Ray keeps a package while a job references it, so a retry (which reuses
    # the failed attempt's runtime_env) finds its code for as long as the supervisor runs.
    for key in ("working_dir", "py_modules"):
        if sent.get(key):
            runtime_env[key] = sent[key]
    env = {k: str(v) for k, v in (sent.get("env_vars") or {}).items()}
    env[contract.ENV_DASHBOARD_ADDRESS] = dashboard
    env.pop(contract.ENV_COMPANION, None)
    runtime_env["env_vars"] = env
    meta = data.get("metadata") or {}
    metadata = {contract.META_ROLE: contract.ROLE_SUPERVISOR, contract.META_SUPERVISES: run_id}
    for key in (contract.META_JOB, contract.META_STORAGE, contract.META_STORAGE_ENDPOINT):
        if meta.get(key):
            metadata[key] = str(meta[key])
    return RayJobRequest(run_id=supervisor_id(run_id, n), job_file=str(meta.get(contract.META_JOB_FILE, "")), notes=[],
                         entrypoint=contract.supervisor_command(run_id, backend), runtime_env=runtime_env, metadata=metadata,
                         entrypoint_num_cpus=0)


def step_body(request: RayJobRequest) -> dict[str, Any]:
    """A step's request as the Jobs API takes it (what the supervisor POSTs, exactly what a client would)."""
    return {"entrypoint": request.entrypoint, "submission_id": request.submission_id,
            "runtime_env": request.runtime_env, "metadata": request.metadata,
            "entrypoint_num_cpus": request.entrypoint_num_cpus, "job_file": request.job_file}


def step_request(body: dict[str, Any]) -> RayJobRequest:
    return RayJobRequest(run_id=str(body["submission_id"]), job_file=str(body.get("job_file") or ""), notes=[],
                         entrypoint=str(body["entrypoint"]), runtime_env=dict(body.get("runtime_env") or {}),
                         metadata=dict(body.get("metadata") or {}),
                         entrypoint_num_cpus=float(body.get("entrypoint_num_cpus") or 0))


def _packages(bodies: list[dict[str, Any]]) -> tuple[str | None, list[str]]:
    """The supervisor's working_dir (the first step's) and py_modules: every other step package, once each."""
    working_dir: str | None = None
    modules: list[str] = []
    for body in bodies:
        env = body.get("runtime_env") or {}
        for uri in [env.get("working_dir"), *(env.get("py_modules") or [])]:
            if not isinstance(uri, str) or not uri:
                continue
            if working_dir is None and uri == env.get("working_dir"):
                working_dir = uri
            elif uri != working_dir and uri not in modules:
                modules.append(uri)
    return working_dir, modules


def pipeline_supervisor_request(pipeline_id: str, pipeline_uri: str | None, job: str, bodies: list[dict[str, Any]],
                                dashboard: str, n: int = 1, backend: str = "ray") -> RayJobRequest:
    """The ``n``th supervisor of pipeline run ``pipeline_id`` for the steps ``bodies`` (uploaded already)."""
    working_dir, modules = _packages(bodies)
    runtime_env: dict[str, Any] = {}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    if modules:
        runtime_env["py_modules"] = modules
    # The first step's env: the storage credentials and the notify targets the pipeline's record and message need.
    env = {k: str(v) for k, v in ((bodies[0].get("runtime_env") or {}).get("env_vars") or {}).items()} if bodies else {}
    for step_only in STEP_ONLY_ENV:
        env.pop(step_only, None)
    env[contract.ENV_JOB_NAME] = job
    env[contract.ENV_PIPELINE_ID] = pipeline_id
    if pipeline_uri:
        env[contract.ENV_RUN_URI] = pipeline_uri
    env[contract.ENV_DASHBOARD_ADDRESS] = dashboard
    env[contract.ENV_PIPELINE_STEPS] = json.dumps(bodies, separators=(",", ":"))
    runtime_env["env_vars"] = env
    first_meta = bodies[0].get("metadata") or {} if bodies else {}
    metadata = {contract.META_ROLE: contract.ROLE_SUPERVISOR, contract.META_SUPERVISES: pipeline_id,
                contract.META_JOB: job}
    if pipeline_uri:
        metadata[contract.META_STORAGE] = pipeline_uri
    if first_meta.get(contract.META_STORAGE_ENDPOINT):
        metadata[contract.META_STORAGE_ENDPOINT] = str(first_meta[contract.META_STORAGE_ENDPOINT])
    return RayJobRequest(run_id=supervisor_id(pipeline_id, n), job_file=str(bodies[0].get("job_file", "")) if bodies
                         else "", notes=[], entrypoint=contract.supervisor_command(pipeline_id, backend), runtime_env=runtime_env,
                         metadata=metadata, entrypoint_num_cpus=0)


def steps_of(supervisor: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The steps a pipeline supervisor (the Jobs API's dict) carries; None: it carries a single run."""
    raw = ((supervisor.get("runtime_env") or {}).get("env_vars") or {}).get(contract.ENV_PIPELINE_STEPS)
    return json.loads(raw) if raw else None


def renewed_if_dead(api: RayJobsAPI, pipeline_id: str, dashboard: str,
                    backend: str = "ray") -> RayJobRequest | dict[str, Any] | None:
    """For `status --repair`, `wait` and a second submit of a pipeline run: its latest supervisor's dict while it
    runs or ended its work; the request of the next one when it died (its job FAILED: killed, node lost) before
    the pipeline ended, up to the one that gives the pipeline up (gives_up); None when the pipeline has no
    supervisor. STOPPED (`rtjob stop`) is never renewed."""
    n, latest = latest_supervisor(api, pipeline_id)
    steps = None if latest is None else steps_of(latest)
    if latest is None or steps is None:
        return None
    if str(latest.get("status")) != "FAILED" or gives_up(n):
        return latest
    env = dict((latest.get("runtime_env") or {}).get("env_vars") or {})
    meta = latest.get("metadata") or {}
    return pipeline_supervisor_request(pipeline_id, env.get(contract.ENV_RUN_URI), str(meta.get(contract.META_JOB) or ""),
                                       steps, dashboard, n + 1, backend)
