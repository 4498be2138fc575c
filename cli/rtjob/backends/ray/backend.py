"""The Ray Jobs backend: a Ray cluster at an address ('ray'); the embedded local cluster ('local') extends it
(embedded_backend.py)."""

from __future__ import annotations

import builtins
import json
import shlex
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, ClassVar

import requests

import rtjob_contract as contract

from ...core.errors import BadInput, RtjobError, Unreachable
from ...core.model import Attempts, RunInfo, RunStatus, SubmitResult
from ...core.redact import MASK, REDACTOR, mask_mapping
from ..base import Backend, ClusterJobs, Planned, Request, Retry, Stuck
from . import precheck
from .client import RayJobsAPI, discover_token, split_credentials
from .request import RayJobRequest, build
from .run_info import run_info

if TYPE_CHECKING:  # the spec layer (pydantic, the schema) is imported by the commands that resolve a job
    from ...jobspec.pricing import HourlyCost
    from ...jobspec.resolve import Placement, ResolvedJob
    from ...jobspec.settings import Settings
    from .retries import RayRetries

AGENT_WAIT_S = 180.0  # a new cluster's job agent, waited for at submit (as long as one `ray start` may take)


def SUBMIT_TIMEOUT_S() -> float:  # noqa: N802 - a setting, read when a submit starts
    """How long one submit (packaging, upload, request) may take: Ray's client has none (RTJOB_SUBMIT_TIMEOUT_S)."""
    import os

    return float(os.environ.get("RTJOB_SUBMIT_TIMEOUT_S") or 600)


def _within(seconds: float, address: str, call: Any) -> None:
    """Run ``call`` in a daemon thread and give up after ``seconds`` (the thread dies with the process)."""
    import threading

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name="rtjob-submit", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise Unreachable(f"the Ray cluster at {address} did not accept the submission within {seconds:.0f}s "
                          "(RTJOB_SUBMIT_TIMEOUT_S); check the run with rtjob list before submitting again")
    if outcome[0] is not None:
        raise outcome[0]


class RayJobsBackend(Backend):
    """A Ray cluster's Jobs API (the dashboard) at an address. Status, list, stop and logs go over plain
    REST (no Ray import); submit uses Ray's own client for its working-dir packaging."""

    name = "ray"
    carries_pipelines = True
    supervisor_backend = "ray"  # its cluster_jobs serve the supervisor's loop; the embedded cluster's too
    ci_secrets: ClassVar[tuple[tuple[str, str], ...]] = (
        ("RAY_ADDRESS", "the cluster's dashboard / Jobs API, e.g. https://ray-head.example.com:8265"),
        ("RAY_AUTH_TOKEN", "the cluster's token, if it uses token authentication"),
    )
    ci_extra = "ray"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        headers = dict(settings.get("headers") or {})
        self._user_headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        self._api: RayJobsAPI | None = self._connect_to_address(settings, headers)

    def _connect_to_address(self, settings: Settings, headers: dict[str, str]) -> RayJobsAPI | None:
        """The Jobs API client for the configured address (no request is sent yet)."""
        address = settings.get("address")
        if not address:
            raise BadInput("backend 'ray' needs an address: --address, RAY_ADDRESS or [tool.rtjob] address")
        address, basic = split_credentials(address)
        if basic is not None:
            if any(k.lower() == "authorization" for k in headers):
                raise BadInput("the address holds user:password@ and an Authorization header is set too: give one")
            headers["Authorization"] = basic
        if not any(k.lower() == "authorization" for k in headers):
            token = discover_token()
            if token:
                REDACTOR.add([token])
                headers["Authorization"] = f"Bearer {token}"
        return RayJobsAPI(address, headers, bool(settings.get("verify_tls")))

    @classmethod
    def placement(cls) -> Placement:
        from ...jobspec.resolve import Placement

        return Placement(cls.name)

    @property
    def api(self) -> RayJobsAPI:
        assert self._api is not None
        return self._api

    @property
    def address(self) -> str:
        return self.api.address

    def _auth_scheme(self) -> str | None:
        """'Bearer', 'Basic' (or another scheme) when requests carry an Authorization header, else None."""
        auth = next((v for k, v in self.api.headers.items() if k.lower() == "authorization"), "")
        return auth.split(" ", 1)[0] if auth else None

    # -- plan / render -------------------------------------------------------------------------
    def plan(self, job: ResolvedJob, cost: HourlyCost | None) -> Planned:
        from ..packaging import check_upload  # pathspec: only when a job is planned

        request = build(job, cost)
        # A working dir Ray would refuse (over 100 MiB, a link out of it) is refused here, before anything is sent.
        size = check_upload(job.working_dir, request.runtime_env["excludes"], job.job_file)
        return Planned(request, size.as_upload(str(job.working_dir)))

    def render(self, request: Request) -> dict[str, Any]:
        assert isinstance(request, RayJobRequest)
        auth = {"Authorization": MASK} if self._auth_scheme() else {}
        return {
            "backend": self.name,
            "address": self.address,
            "headers": {**mask_mapping(self._user_headers), **auth},
            "submit_job": {
                "submission_id": request.submission_id,
                "entrypoint": request.masked_entrypoint(),
                "runtime_env": request.masked_runtime_env(),
                "metadata": mask_mapping(request.metadata),
                "entrypoint_num_cpus": request.entrypoint_num_cpus,
            },
        }

    def equivalent_command(self, request: Request) -> str:
        assert isinstance(request, RayJobRequest)
        parts = []
        headers = mask_mapping(self._user_headers)
        scheme = self._auth_scheme()
        if scheme == "Bearer":
            parts.append(f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN={MASK}")
        elif scheme:  # e.g. basic auth from user:password@ in the address: Ray takes it as a header
            headers["Authorization"] = MASK
        parts += ["ray", "job", "submit", "--address", self.address, "--submission-id", request.submission_id]
        if headers:
            parts += ["--headers", json.dumps(headers)]
        parts += ["--runtime-env-json", json.dumps(request.masked_runtime_env(), sort_keys=True)]
        parts += ["--metadata-json", json.dumps(mask_mapping(request.metadata), sort_keys=True)]
        parts += ["--entrypoint-num-cpus", f"{request.entrypoint_num_cpus:g}", "--"]
        return (" ".join(shlex.quote(p) if not p.startswith("RAY_AUTH") else p for p in parts) + " "
                + request.masked_entrypoint())

    # -- checks --------------------------------------------------------------------------------
    def _never_fits(self, job: ResolvedJob, what: str, missing: str) -> list[str]:
        """A job that does not fit the cluster's nodes: an error, or warnings when nodes may still join."""
        scaler = self.api.has_autoscaler()
        if scaler is False:
            raise BadInput(
                f"{job.job_file}: {what} can never fit on {self.address} ({missing}) and the cluster has no autoscaler"
            )
        if scaler is None:
            return [f"{what} does not fit the cluster's current nodes ({missing}); it will wait for new nodes"]
        return [f"{what} needs the autoscaler to add nodes ({missing}); the job will be PENDING until they join"]

    def precheck(self, job: ResolvedJob) -> list[str]:
        if not job.shape_declared:
            return []  # its entrypoint asks Ray for what it needs: the follower watches for what never comes
        need = job.worker_resources()
        nodes = [
            {k: float(v) for k, v in (n.get("resources_total") or {}).items() if not k.startswith("node:")}
            for n in self.api.nodes()
        ]
        if precheck.bundles_fit([need] * job.num_workers, nodes):
            return []
        missing = precheck.shortfall(need, job.num_workers, nodes)
        return self._never_fits(job, precheck.describe(need, job.num_workers), missing)

    def _final_shortage(self) -> bool:
        """Whether resources the cluster lacks now can never come (no autoscaler to add nodes)."""
        return self.api.has_autoscaler() is False

    def stuck(self, run_id: str) -> Stuck | None:
        from . import stuck

        data = self.api.job(run_id)
        job_id = (data or {}).get("job_id")
        if not job_id or (data or {}).get("status") != "RUNNING":
            return None
        missing = stuck.waits_for(self.api, str(job_id))
        return Stuck(missing, self._final_shortage()) if missing else None

    # -- run control ---------------------------------------------------------------------------
    def _submit_new(self, request: Request) -> SubmitResult:
        assert isinstance(request, RayJobRequest)
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise BadInput("submitting to Ray needs Ray: pip install 'rtjob[ray]'") from None
        from .client import quiet_ray_client

        quiet_ray_client()  # Ray logs every packaging step at INFO/WARNING; rtjob reports what matters itself
        try:
            _within(SUBMIT_TIMEOUT_S(), self.address, lambda: self._upload_and_submit(JobSubmissionClient, request))
        except (ConnectionError, requests.exceptions.RequestException) as exc:
            raise Unreachable(f"cannot reach the Ray cluster at {self.address} to submit: {type(exc).__name__}") from None
        except RuntimeError as exc:
            text = str(exc)
            if type(exc).__name__ == "AuthenticationError":
                raise Unreachable(f"authentication failed at {self.address} while submitting: the cluster wants "
                                  "a token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)") from None
            if "already exists" in text:  # lost a race with another submit of the same id
                existing = self.api.job(request.submission_id)
                if existing is not None:
                    return SubmitResult(self._info(existing), created=False)
            if "401" in text or "403" in text or "Unauthorized" in text:
                raise Unreachable(f"authentication failed at {self.address} while submitting") from None
            raise Unreachable(f"the Ray cluster at {self.address} refused the submission: "
                              f"{text.strip().splitlines()[-1][:300]}") from None
        except Exception as exc:
            if type(exc).__name__ == "AuthenticationError":  # ray.exceptions.AuthenticationError (401/403)
                raise Unreachable(f"authentication failed at {self.address} while submitting: the cluster wants "
                                  "a token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)") from None
            raise
        try:
            return SubmitResult(self.status(request.submission_id), created=True)
        except RtjobError as exc:
            if not exc.retriable:
                raise
            # Sent, but the status read hit a fault that may pass: report it as submitted (the follower
            # retries its reads); submitting again would only attach to it.
            return SubmitResult(RunInfo(id=request.submission_id, job=request.metadata.get(contract.META_JOB),
                                        backend=self.name, status=RunStatus.PENDING, address=self.address,
                                        storage_uri=request.metadata.get(contract.META_STORAGE)), created=True)

    def _upload_and_submit(self, client_class: Any, request: RayJobRequest) -> None:
        """Ray's own client: it packages and uploads the working dir, then submits."""
        client = client_class(self.address, headers=self.api.headers, verify=self.api.verify,
                              create_cluster_if_needed=False)
        from .sealed import sealed_runtime_env

        with sealed_runtime_env(request) as runtime_env:  # client-held secrets, never env_vars
            self._submit_until_agent(client, request, runtime_env)

    def _submit_until_agent(self, client: Any, request: RayJobRequest, runtime_env: dict[str, Any]) -> None:
        # A cluster that just started answers 500 "No available agent" until its job agent is up: on a loaded 2-core
        # machine that once took over 60 s.
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                client.submit_job(
                    entrypoint=request.entrypoint,
                    submission_id=request.submission_id,
                    runtime_env=runtime_env,
                    metadata=request.metadata,
                    entrypoint_num_cpus=request.entrypoint_num_cpus,
                    **({"entrypoint_resources": request.entrypoint_resources} if request.entrypoint_resources else {}),
                )
                return
            except RuntimeError as exc:
                if "No available agent" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _info(self, data: dict[str, Any]) -> RunInfo:
        return run_info(data, self.address, self.name)

    def find(self, run_id: str) -> RunInfo | None:
        data = self.api.job(run_id)
        return self._info(data) if data is not None else None

    def status(self, run_id: str) -> RunInfo:
        data = self.api.job(run_id)
        if data is None:
            raise BadInput(f"no run {run_id!r} at {self.address} (rtjob list shows the runs there)")
        return self._info(data)

    def _list(self) -> list[RunInfo]:
        from .kept_jobs import is_sync_job
        from .supervisor_jobs import is_supervisor  # a run's supervisor is rtjob's, not a run of the user's

        return [self._info(d) for d in self.api.jobs()
                if d.get("type", "SUBMISSION") == "SUBMISSION" and not is_supervisor(d) and not is_sync_job(d)]

    stop_wait_s = 30.0

    def _stop_running(self, run_id: str) -> RunInfo:
        self.api.stop(run_id)
        deadline = time.monotonic() + self.stop_wait_s
        info = self.status(run_id)
        while not info.status.terminal and time.monotonic() < deadline:
            time.sleep(0.5)
            info = self.status(run_id)
        return info

    def logs(self, run_id: str) -> str:
        return self.api.logs(run_id)

    def _delete_ended(self, run_id: str) -> None:
        self.api.delete(run_id)

    # -- retries (Ray Jobs has none of its own: retries.py) ---------------------------------------
    def _retries(self) -> RayRetries:
        from .retries import RayRetries

        return RayRetries(self.api, self.submit)

    def attempts(self, run_id: str) -> Attempts | None:
        return self._retries().attempts(run_id)

    def train_storage(self, run_id: str, log_text: str | None = None) -> list[str]:
        """What Ray Train's state API says the run's Train runs stored (the job env turns tracking on), else the
        folders of the checkpoints its driver log names (a cluster that keeps no Train state)."""
        from .train_runs import folders_from_log, folders_from_state

        found = folders_from_state(self.api.train_runs(), run_id)
        if found:
            return found
        return folders_from_log(self.logs(run_id) if log_text is None else log_text)

    def retry(self, run_id: str, request: Request | None) -> Retry | None:
        return self._retries().decide_and_resubmit(run_id, request if isinstance(request, RayJobRequest) else None)

    def store_kept(self, run_id: str) -> list[RunInfo]:
        """One sync job (kept_jobs.py) per node that drove an attempt of the run, each pinned to its node."""
        from .kept_jobs import driver_node, sync_request

        attempts = self.attempts(run_id)
        ids = [a.id for a in attempts.chain] if attempts is not None and attempts.chain else [run_id]
        started: list[RunInfo] = []
        nodes: set[str] = set()
        n = 1
        for attempt_id in ids:
            data = self.api.job(attempt_id)
            node = driver_node(data) if data is not None else None
            if data is None or node is None or node in nodes:
                continue
            nodes.add(node)
            while self.api.job(f"{run_id}{contract.SYNC_SUFFIX}{n}") is not None:
                n += 1
            started.append(self.submit(sync_request(run_id, data, node, n)).run)
        if not started:
            raise BadInput(f"run {run_id}: the cluster at {self.address} no longer knows which node ran it: run "
                           f"`rtjob sync {run_id}` on the node its record names")
        return started

    # -- the supervisor on the cluster (its jobs: supervisor_jobs.py; what its loop uses: in_cluster.py) --------------
    def supervise(self, run_id: str) -> RunInfo | None:
        """Start the run's supervisor (``<run id>-supervisor``; a second submit attaches) when the run allows
        retries: it references the run's uploaded packages, so they stay while it lives. One that died while the
        run (or pipeline) still had something to carry is replaced (``-supervisor-2``, ...: two clients start one),
        at most MAX_REPLACEMENTS times, then once more by the one that gives it up."""
        from .retries import root_id
        from .supervisor_jobs import (
            latest_supervisor,
            needs_new_supervisor,
            supervisor_request,
            wants_supervisor,
        )

        data = self.api.job(run_id)
        root = root_id(run_id, data)
        data = data if root == run_id else self.api.job(root)
        if data is None:  # a pipeline run's id: its supervisor is its only job
            from .supervisor_jobs import renewed_if_dead

            renewed = renewed_if_dead(self.api, run_id, self.address, str(self.supervisor_backend))
            return None if renewed is None else (self.submit(renewed).run if isinstance(renewed, RayJobRequest)
                                                 else self._info(renewed))
        if not wants_supervisor(data):
            return None
        n, latest = latest_supervisor(self.api, root)
        if not needs_new_supervisor(self.api, root, latest):  # alive, or the run has nothing left to carry
            return None if latest is None else self._info(latest)
        return self.submit(supervisor_request(data, self.address, n + 1, str(self.supervisor_backend))).run

    def supervisor_of(self, run_id: str) -> RunInfo | None:
        from .retries import root_id
        from .supervisor_jobs import latest_supervisor

        _, latest = latest_supervisor(self.api, root_id(run_id, self.api.job(run_id)))
        return None if latest is None else self._info(latest)

    def supervise_pipeline(self, pipeline_id: str, storage_uri: str | None, job: str,
                           requests: builtins.list[Request],
                           queued: dict[str, dict[str, Any]] | None = None) -> RunInfo | None:
        from .in_cluster import upload_packages
        from .supervisor_jobs import pipeline_supervisor_request, renewed_if_dead, step_body

        existing = renewed_if_dead(self.api, pipeline_id, self.address, str(self.supervisor_backend))
        if isinstance(existing, RayJobRequest):  # it died before the pipeline ended: the next one goes on
            return self.submit(existing).run
        if existing is not None:  # a second submit of the pipeline attaches to its supervisor
            return self._info(existing)
        bodies = [(queued or {}).get(r.run_id) or step_body(upload_packages(self.address, self.api, r))
                  for r in requests if isinstance(r, RayJobRequest)]  # a queued step's: uploaded already
        return self.submit(pipeline_supervisor_request(pipeline_id, storage_uri, job, bodies, self.address,
                                                       backend=str(self.supervisor_backend))).run

    def pipeline_supervisor_preview(self, pipeline_id: str, storage_uri: str | None, job: str,
                                    requests: builtins.list[Request]) -> dict[str, Any] | None:
        from .supervisor_jobs import pipeline_supervisor_request, step_body

        bodies = [{**step_body(r), "entrypoint": r.masked_entrypoint(), "runtime_env": r.masked_runtime_env()}
                  for r in requests if isinstance(r, RayJobRequest)]
        return self.render(pipeline_supervisor_request(pipeline_id, storage_uri, job, bodies, self.address,
                                                       backend=str(self.supervisor_backend)))

    @classmethod
    def cluster_jobs(cls) -> ClusterJobs:
        from .in_cluster import RayClusterJobs, in_cluster_api

        return RayClusterJobs(in_cluster_api())

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        """The driver log from its start, as it is written: the State API stream (logtail.py)."""
        from . import logtail

        async for chunk in logtail.tail(self.api, run_id):
            yield chunk
