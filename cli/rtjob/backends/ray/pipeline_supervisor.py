"""A pipeline's supervisor on a Ray cluster: the Ray job ``<pipeline id>-supervisor`` (0 CPUs, on the head node) that
runs the pipeline's steps in order with no rtjob client alive.

* the client's half, ``pipeline_supervisor_request``: the steps' complete Jobs API requests, their packages uploaded
  already (``gcs://`` URIs), go to the supervisor as JSON in its env (RTJOB_PIPELINE_STEPS); its own runtime_env
  references every one of those packages, so Ray keeps them as long as it runs (a later step or a retry needs them,
  and nothing on the cluster can re-pack the client's checkout);
* the cluster's half, ``PipelineSupervisor``: submits step i+1 only after step i SUCCEEDED (its job-level retries
  carried by the run supervisor's rule, supervisor.py), attaches to a step that exists (a client following it may
  have submitted it first: the ids are deterministic), reads the stop marker before and after each submit, and
  tells the run side how the pipeline ended (its record and its one notification).

Imports at module level: the stdlib, rtjob_contract and requests (the cluster runs it)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract

from ...core.model import SubmitResult
from ..base import PipelineHooks
from .client import RayJobsAPI, quiet_ray_client
from .request import RayJobRequest
from .retries import RayRetries
from .supervisor import (
    CARRIED_BY,
    MODULE,
    Supervisor,
    missing_packages,
    no_submit,
    submit_over_rest,
    supervisor_id,
)

SUCCEEDED = "SUCCEEDED"


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
                                dashboard: str, n: int = 1) -> RayJobRequest:
    """The ``n``th supervisor of pipeline run ``pipeline_id`` for the steps ``bodies`` (uploaded already)."""
    working_dir, modules = _packages(bodies)
    runtime_env: dict[str, Any] = {}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    if modules:
        runtime_env["py_modules"] = modules
    # The first step's env: the storage credentials and the notify targets the pipeline's record and message need.
    env = {k: str(v) for k, v in ((bodies[0].get("runtime_env") or {}).get("env_vars") or {}).items()} if bodies else {}
    for step_only in (contract.ENV_COMPANION, contract.ENV_RUN_NAME, contract.ENV_STEP_NAME, contract.ENV_INPUT_URI,
                      contract.ENV_STEP_URIS, contract.ENV_RUN_DIR):
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
                         else "", notes=[], entrypoint=f"python -m {MODULE} {shlex.quote(pipeline_id)} {CARRIED_BY}",
                         runtime_env=runtime_env, metadata=metadata, entrypoint_num_cpus=0)


def steps_of(supervisor: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The steps a pipeline supervisor (the Jobs API's dict) carries; None: it carries a single run."""
    raw = ((supervisor.get("runtime_env") or {}).get("env_vars") or {}).get(contract.ENV_PIPELINE_STEPS)
    return json.loads(raw) if raw else None


def renewed(supervisor: dict[str, Any], dashboard: str, n: int) -> RayJobRequest:
    """The ``n``th supervisor of the pipeline a dead one carried: the same steps and packages."""
    env = dict((supervisor.get("runtime_env") or {}).get("env_vars") or {})
    meta = supervisor.get("metadata") or {}
    return pipeline_supervisor_request(str(meta.get(contract.META_SUPERVISES)), env.get(contract.ENV_RUN_URI),
                                       str(meta.get(contract.META_JOB) or ""), steps_of(supervisor) or [],
                                       dashboard, n)


@dataclass
class StepOutcome:
    status: str | None  # None: never submitted
    line: str | None = None  # why the pipeline ends here, when the step itself did not say


def next_action(statuses: list[str | None], stop: bool) -> int | None:
    """The rule, pure: the index of the step to carry now (submit or attach to), or None when the pipeline has
    ended (a step that did not succeed, a stop, or all steps SUCCEEDED). A step still running is carried on."""
    if stop:
        return None
    for i, status in enumerate(statuses):
        if status == SUCCEEDED:
            continue
        if status in (None, "PENDING", "RUNNING"):
            return i
        return None
    return None


class PipelineSupervisor:
    def __init__(self, api: RayJobsAPI, pipeline_id: str, bodies: list[dict[str, Any]], hooks: PipelineHooks,
                 submit: Callable[[RayJobRequest], SubmitResult] | None = None) -> None:
        self.api = api
        self.submit = submit or (lambda request: submit_over_rest(api, request))
        self.pipeline_id = pipeline_id
        self.bodies = bodies
        self.hooks = hooks
        self.steps = [StepOutcome(None) for _ in bodies]
        self._code: dict[str, Any] | None = None  # the supervisor's own code, uploaded (STEP_CODE_OF_SUPERVISOR)

    def _final(self, step_id: str) -> str:
        """The step's outcome: its last attempt's status."""
        chain = RayRetries(self.api, no_submit).chain_of(step_id)
        last = self.api.job(chain[-1].id if chain else step_id) or {}
        return str(last.get("status") or "UNKNOWN")

    def run(self) -> int:
        say = self.hooks.say
        ended = self.hooks.ended_before()
        if ended is not None:  # a restarted supervisor (the platform's retry of the job hosting it): nothing to do
            say(f"pipeline {self.pipeline_id} ended {ended} already: nothing to carry")
            return self._exit_code(ended)
        say(f"carrying pipeline {self.pipeline_id}: {', '.join(str(b['submission_id']) for b in self.bodies)}")
        self.hooks.began(self.bodies)
        self.hooks.beat(self.pipeline_id)
        for i, body in enumerate(self.bodies):  # what already ran (an earlier supervisor, a client) is known first
            data = self.api.job(str(body["submission_id"]))
            if (data is not None and str(data.get("status")) == SUCCEEDED and self._final(body["submission_id"])
                    == SUCCEEDED) or (data is None and self.hooks.succeeded_before(body)):
                self.steps[i].status = SUCCEEDED
        while (next_step := next_action([s.status for s in self.steps], self.hooks.stop_requested())) is not None:
            self.steps[next_step] = self._carry(next_step, self.bodies[next_step])
        if self.hooks.stop_requested():
            say("the pipeline's stop was requested: no later step is submitted")
        status = self.hooks.ended({str(b["submission_id"]): s.status for b, s in zip(self.bodies, self.steps,
                                                                                     strict=True)},
                                  next((s.line for s in self.steps if s.line), None))
        return self._exit_code(status)

    @staticmethod
    def _exit_code(status: str | None) -> int:
        """0, except where the job hosting the supervisor shows the pipeline's outcome (RTJOB_SUPERVISOR_EXIT):
        on Ray a supervisor job that FAILED is one that died, and is replaced."""
        import os

        if os.environ.get(contract.ENV_SUPERVISOR_EXIT) != "outcome":
            return 0
        return 0 if status == SUCCEEDED else 1

    def _with_code(self, request: RayJobRequest, body: dict[str, Any]) -> RayJobRequest:
        """A step that runs the supervisor's own code (STEP_CODE_OF_SUPERVISOR): its working dir and rtjob's
        modules, uploaded once by this process with Ray's own upload (the same content gives the same URI)."""
        if body.get("code") != contract.STEP_CODE_OF_SUPERVISOR:
            return request
        if self._code is None:
            import os

            from ..packaging import companion_modules

            local = dataclasses.replace(request, runtime_env={
                "working_dir": os.getcwd(), "py_modules": companion_modules(),
                "excludes": request.runtime_env.get("excludes") or []})
            self._code = upload_packages(self.api.address, self.api, local).runtime_env
        return dataclasses.replace(request, runtime_env={**request.runtime_env, **self._code})

    def _carry(self, i: int, body: dict[str, Any]) -> StepOutcome:
        step_id = str(body["submission_id"])
        say = self.hooks.say
        if self.api.job(step_id) is None:
            missing = missing_packages(self.api, body.get("runtime_env") or {})
            if missing:
                line = f"cannot run step {step_id}: the cluster no longer has its code ({', '.join(missing)})"
                say(line)
                return StepOutcome("FAILED", line)
            created = self.submit(self._with_code(step_request(body), body)).created
            say(f"step {i + 1}/{len(self.bodies)}: {'submitted' if created else 'attached to'} {step_id}")
            if self.hooks.stop_requested():  # the stop came while it submitted: what it started stops too
                say(f"the pipeline's stop was requested: stopping {step_id}")
                self.api.stop(step_id)
                return StepOutcome("STOPPED")
        else:
            say(f"step {i + 1}/{len(self.bodies)}: attached to {step_id}")
        Supervisor(self.api, step_id, self.hooks.for_step(body), self.submit).run()  # the step's retries, by the run's rule
        status = self._final(step_id)
        say(f"step {i + 1}/{len(self.bodies)} {step_id} ended {status}")
        return StepOutcome(status)



def steps_from_env() -> list[dict[str, Any]]:
    import os

    return list(json.loads(os.environ.get(contract.ENV_PIPELINE_STEPS) or "[]"))


def upload_packages(address: str, api: RayJobsAPI, request: RayJobRequest) -> RayJobRequest:
    """The request with its local working_dir and py_modules uploaded to the cluster (gcs:// URIs), as Ray's own
    client does at submit (the same content gives the same URI: a client submitting the step later re-uses it)."""
    import copy

    from ray.job_submission import JobSubmissionClient

    quiet_ray_client()  # as a single job's submit: rtjob says "uploading working dir" itself
    client = JobSubmissionClient(address, headers=api.headers, verify=api.verify, create_cluster_if_needed=False)
    runtime_env = copy.deepcopy(request.runtime_env)
    client._upload_working_dir_if_needed(runtime_env)  # noqa: SLF001 - Ray's own upload, the one submit_job uses
    client._upload_py_modules_if_needed(runtime_env)  # noqa: SLF001
    return dataclasses.replace(request, runtime_env=runtime_env)


def renewed_if_dead(api: RayJobsAPI, pipeline_id: str, dashboard: str) -> RayJobRequest | dict[str, Any] | None:
    """For `status`, `wait` and a second submit of a pipeline run: its latest supervisor's dict while it runs or
    ended its work; the request of the next one when it died (its job FAILED: killed, node lost) before the
    pipeline ended; None when the pipeline has no supervisor. STOPPED (`rtjob stop`) is never renewed."""
    from .supervisor import MAX_SUPERVISORS, latest_supervisor

    n, latest = latest_supervisor(api, pipeline_id)
    if latest is None or steps_of(latest) is None:
        return None
    if str(latest.get("status")) != "FAILED" or n >= MAX_SUPERVISORS:
        return latest
    return renewed(latest, dashboard, n + 1)
