"""The Jobs API from inside a Ray cluster, as the supervisor's loop (runside/supervisor/loop.py) uses it:
``RayClusterJobs``, the backend's primitives behind ``ClusterJobs`` (an attempt's state in the one retry rule's
terms, the next attempt submitted over REST, a step submitted, a stop, the replacement rule's verdict), and how the
loop reaches the dashboard (RTJOB_DASHBOARD_ADDRESS, else Ray's GCS) with the cluster's token.

Imports at module level: the stdlib, rtjob_contract and requests (the cluster runs it)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

from ...core.errors import RtjobError
from ...core.model import SubmitResult
from ..base import ClusterJobs, JobState
from .client import RayJobsAPI, discover_token, quiet_ray_client
from .request import RayJobRequest
from .retries import RayRetries, attempt_of, max_retries_of, retry_reason, root_id
from .run_info import run_info
from .supervisor_jobs import given_up_line, gives_up, latest_supervisor, missing_packages, step_request


class RayClusterJobs(ClusterJobs):
    """The cluster's Jobs API ``api``; ``submit`` sends a request (attaching to an id that exists: REST by
    default)."""

    def __init__(self, api: RayJobsAPI, submit: Callable[[RayJobRequest], SubmitResult] | None = None) -> None:
        self.api = api
        self.submit = submit or (lambda request: submit_over_rest(api, request))
        self.retries = RayRetries(api, self.submit)
        self._code: dict[str, Any] | None = None  # the supervisor's own code, uploaded (STEP_CODE_OF_SUPERVISOR)

    def state(self, run_id: str) -> JobState | None:
        data = self.api.job(run_id)
        if data is None:
            return None
        return JobState(id=run_id, status=str(data.get("status")), root=root_id(run_id, data),
                        attempt=attempt_of(data), max_retries=max_retries_of(data), retry_reason=retry_reason(data))

    def latest_attempt(self, run_id: str) -> str:
        chain = self.retries.chain_of(run_id)
        return chain[-1].id if chain else run_id

    def missing_code(self, run_id: str) -> list[str]:
        return missing_packages(self.api, dict((self.api.job(run_id) or {}).get("runtime_env") or {}))

    def resubmit(self, run_id: str) -> tuple[str, bool]:
        data = self.api.job(run_id) or {}
        info, created = self.retries.resubmit(data, attempt_of(data) + 1)
        return info.id, created

    def stop(self, run_id: str) -> None:
        self.api.stop(run_id)

    def given_up_line(self, run_id: str, what: str) -> str | None:
        n = latest_supervisor(self.api, run_id)[0]
        return given_up_line(run_id, n, what) if gives_up(n) else None

    def steps(self) -> list[dict[str, Any]]:
        return list(json.loads(os.environ.get(contract.ENV_PIPELINE_STEPS) or "[]"))

    def step_id(self, step: dict[str, Any]) -> str:
        return str(step["submission_id"])

    def step_missing_code(self, step: dict[str, Any]) -> list[str]:
        return missing_packages(self.api, dict(step.get("runtime_env") or {}))

    def submit_step(self, step: dict[str, Any]) -> bool:
        return self.submit(self._with_sealed(self._with_code(step_request(step), step), step)).created

    def _with_sealed(self, request: RayJobRequest, step: dict[str, Any]) -> RayJobRequest:
        """A step whose client-held secrets are in this supervisor's sealed package (STEP_SEALED: a pipeline hosted
        as one Anyscale job): sealed again for that step alone, a package of its own on this cluster (Ray keeps it
        while the step's job refers to it), never the step's env."""
        if step.get(contract.STEP_SEALED) is None:
            return request
        from ...core.secret_refs import sealed_step

        values, env = sealed_step(int(step[contract.STEP_SEALED]))
        sealing = dataclasses.replace(request, runtime_env={}, sealed=values, sealed_env=env)
        sealed = upload_packages(self.api.address, self.api, sealing).runtime_env.get("py_modules") or []
        modules = [*(request.runtime_env.get("py_modules") or []), *sealed]
        return dataclasses.replace(request, runtime_env={**request.runtime_env, "py_modules": modules})

    def _with_code(self, request: RayJobRequest, step: dict[str, Any]) -> RayJobRequest:
        """A step that runs the supervisor's own code (STEP_CODE_OF_SUPERVISOR): its working dir and rtjob's
        modules, uploaded once by this process with Ray's own upload (the same content gives the same URI)."""
        if step.get("code") != contract.STEP_CODE_OF_SUPERVISOR:
            return request
        if self._code is None:
            from ..packaging import companion_modules

            local = dataclasses.replace(request, runtime_env={
                "working_dir": os.getcwd(), "py_modules": companion_modules(),
                "excludes": request.runtime_env.get("excludes") or []})
            self._code = upload_packages(self.api.address, self.api, local).runtime_env
        return dataclasses.replace(request, runtime_env={**request.runtime_env, **self._code})


def in_cluster_api(env: dict[str, str] | None = None) -> RayJobsAPI:
    """The Jobs API as a driver on the cluster reaches it: the dashboard's address the client gave
    (RTJOB_DASHBOARD_ADDRESS), with the cluster's token as its processes carry it (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)."""
    env = dict(os.environ if env is None else env)
    address = env.get(contract.ENV_DASHBOARD_ADDRESS) or _dashboard_from_gcs(env) or "http://127.0.0.1:8265"
    token = discover_token()
    return RayJobsAPI(address, {"Authorization": f"Bearer {token}"} if token else {})


def _dashboard_from_gcs(env: dict[str, str]) -> str | None:
    """The dashboard's address as the cluster itself publishes it (Ray's own lookup from the driver's RAY_ADDRESS,
    the one `JobSubmissionClient()` makes inside a cluster): a job hosting a pipeline on Anyscale, whose client
    never saw the dashboard."""
    if not env.get("RAY_ADDRESS"):
        return None
    try:
        from ray.dashboard.utils import get_address_for_submission_client

        return str(get_address_for_submission_client(None))
    except Exception:  # noqa: BLE001 - not inside a Ray cluster: the default address
        return None


def submit_over_rest(api: RayJobsAPI, request: RayJobRequest) -> SubmitResult:
    """POST /api/jobs/ (the request's packages are URIs already: nothing to upload); an id that exists (another
    submitter was first) is attached to."""
    body = {"entrypoint": request.entrypoint, "submission_id": request.submission_id,
            "runtime_env": request.runtime_env, "metadata": request.metadata,
            "entrypoint_num_cpus": request.entrypoint_num_cpus}
    resp = api.request("POST", "/api/jobs/", json=body)
    created = resp.status_code < 400
    if not created and "already exists" not in resp.text:
        raise RtjobError(f"{api.address} refused {request.submission_id}: HTTP {resp.status_code} "
                         f"{resp.text.strip().splitlines()[-1][:300] if resp.text.strip() else ''}")
    data = api.job(request.submission_id) or {"submission_id": request.submission_id, "status": "PENDING"}
    return SubmitResult(run_info(data, api.address), created=created)


def upload_packages(address: str, api: RayJobsAPI, request: RayJobRequest) -> RayJobRequest:
    """The request with its local working_dir and py_modules uploaded to the cluster (gcs:// URIs), as Ray's own
    client does at submit (the same content gives the same URI: a client submitting the step later re-uses it)."""
    import copy

    from ray.job_submission import JobSubmissionClient

    quiet_ray_client()  # as a single job's submit: rtjob says "uploading working dir" itself
    client = JobSubmissionClient(address, headers=api.headers, verify=api.verify, create_cluster_if_needed=False)
    from .sealed import sealed_runtime_env

    with sealed_runtime_env(request) as sent:  # a step's client-held secrets: its sealed package, never env_vars
        runtime_env = copy.deepcopy(sent)
        client._upload_working_dir_if_needed(runtime_env)  # noqa: SLF001 - Ray's own upload, the one submit_job uses
        client._upload_py_modules_if_needed(runtime_env)  # noqa: SLF001
    return dataclasses.replace(request, runtime_env=runtime_env)
