"""The Ray Jobs backend: a Ray cluster at an address, or the embedded local cluster (backend 'local')."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import precheck
from ..errors import BadInput, RtjobError, Unreachable
from ..masking import MASK, mask_mapping, redact, secret_values
from .base import RunInfo, RunStatus, SubmitResult, iso_time
from .ray_http import RayJobsAPI, discover_token, split_credentials

if TYPE_CHECKING:  # resolve (pydantic, the schema) is imported by the commands that resolve a job
    from ..project import Settings
    from ..resolve import ResolvedJob

META_JOB = "rtjob.job"
META_STORAGE = "rtjob.storage_uri"
META_STORAGE_ENDPOINT = "rtjob.storage_endpoint"


@dataclass
class RayJobRequest:
    """Exactly the arguments of JobSubmissionClient.submit_job (plus where it goes)."""

    address: str
    submission_id: str
    entrypoint: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str]
    entrypoint_num_cpus: float = 0
    job: ResolvedJob | None = field(default=None, repr=False)


class RayJobsBackend:
    def __init__(self, name: str, address: str, headers: dict[str, str], verify: bool = True) -> None:
        self.name = name
        self.api = RayJobsAPI(address, headers, verify)
        self.address = self.api.address
        self._user_headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        self.display_address = self.address

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        start_local: bool = False,
        offline: bool = False,
        nodes: int = 1,
        cpus_per_node: int = 1,
    ) -> RayJobsBackend:
        headers = dict(settings.get("headers") or {})
        name = settings.get("backend")
        if name == "local":
            from .. import local_cluster

            if offline:
                cluster = local_cluster.load_state()
                if cluster is None:
                    backend = cls("local", "http://127.0.0.1:8265", {**headers, "Authorization": "Bearer (set at start)"})
                    backend.display_address = "embedded cluster (not running; submit starts it)"
                    return backend
                headers["Authorization"] = f"Bearer {cluster.token}"
                return cls("local", cluster.address, headers, True)
            if start_local:
                cluster = local_cluster.up(nodes, cpus_per_node, log=_stderr)
            else:
                cluster = local_cluster.require()
            headers["Authorization"] = f"Bearer {cluster.token}"
            return cls("local", cluster.address, headers, True)
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
                headers["Authorization"] = f"Bearer {token}"
        return cls("ray", address, headers, bool(settings.get("verify_tls")))

    # -- plan / render -------------------------------------------------------------------------
    def plan(self, job: ResolvedJob) -> RayJobRequest:
        from ..packaging import check_upload  # pathspec: only when a job is planned

        # A working dir Ray would refuse (over 100 MiB) is refused here, before anything is sent.
        check_upload(job.working_dir, job.spec.excludes, job.job_file)
        entrypoint = job.entrypoint
        if job.spec.timeout_s:
            # Ray Jobs has no run limit of its own: coreutils' timeout enforces the spec's timeout_s.
            entrypoint = f"timeout -k 30 {job.spec.timeout_s} bash -c {shlex.quote(entrypoint)}"
        runtime_env: dict[str, Any] = {
            "working_dir": str(job.working_dir),
            "env_vars": dict(job.env_vars),
        }
        if job.spec.excludes:
            runtime_env["excludes"] = list(job.spec.excludes)
        if job.spec.requirements:
            runtime_env["pip"] = list(job.spec.requirements)
        metadata = {
            META_JOB: job.spec.name,
            "rtjob.job_file": job.job_file,
            "rtjob.nodes": str(job.nodes),
            "rtjob.workers": str(job.num_workers),
        }
        if job.storage_uri:
            metadata[META_STORAGE] = job.storage_uri
            if job.storage_endpoint:  # so `rtjob pull ID` finds an S3-compatible server by itself
                metadata[META_STORAGE_ENDPOINT] = job.storage_endpoint
        if job.spec.max_retries:  # rtjob resubmits a run whose driver was lost (cli/rtjob/retries.py)
            metadata["rtjob.max_retries"] = str(job.spec.max_retries)
        for key, value in job.spec.tags.items():
            metadata[f"tag.{key}"] = value
        return RayJobRequest(self.address, job.run_id, entrypoint, runtime_env, metadata, 0, job)

    def _secrets(self, request: RayJobRequest) -> list[str]:
        """Secret values that may appear inside the entrypoint: secret-looking args and env values."""
        args = {k: str(v) for k, v in (request.job.spec.args.items() if request.job else [])}
        return secret_values(args) + secret_values(request.runtime_env.get("env_vars", {}))

    def render(self, request: RayJobRequest) -> dict[str, Any]:
        env = dict(request.runtime_env)
        env["env_vars"] = mask_mapping(env.get("env_vars", {}))
        return {
            "backend": self.name,
            "address": request.address,
            "headers": {**mask_mapping(self._user_headers), **({"Authorization": MASK} if self._has_auth else {})},
            "submit_job": {
                "submission_id": request.submission_id,
                "entrypoint": redact(request.entrypoint, self._secrets(request)),
                "runtime_env": env,
                "metadata": request.metadata,
                "entrypoint_num_cpus": request.entrypoint_num_cpus,
            },
        }

    @property
    def _has_auth(self) -> bool:
        return any(k.lower() == "authorization" for k in self.api.headers)

    def equivalent_command(self, request: RayJobRequest) -> str:
        rendered = self.render(request)["submit_job"]
        parts = []
        auth = next((v for k, v in self.api.headers.items() if k.lower() == "authorization"), "")
        headers = mask_mapping(self._user_headers)
        if auth.startswith("Bearer "):
            parts.append(f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN={MASK}")
        elif auth:  # e.g. basic auth from user:password@ in the address: Ray takes it as a header
            headers["Authorization"] = MASK
        parts += ["ray", "job", "submit", "--address", request.address, "--submission-id", request.submission_id]
        if headers:
            parts += ["--headers", json.dumps(headers)]
        parts += ["--runtime-env-json", json.dumps(rendered["runtime_env"], sort_keys=True)]
        parts += ["--metadata-json", json.dumps(request.metadata, sort_keys=True)]
        parts += ["--entrypoint-num-cpus", f"{request.entrypoint_num_cpus:g}", "--"]
        entrypoint = redact(request.entrypoint, self._secrets(request))
        return " ".join(shlex.quote(p) if not p.startswith("RAY_AUTH") else p for p in parts) + " " + entrypoint

    # -- checks --------------------------------------------------------------------------------
    def precheck(self, job: ResolvedJob) -> list[str]:
        need = job.worker_resources()
        nodes = [
            {k: float(v) for k, v in (n.get("resources_total") or {}).items() if not k.startswith("node:")}
            for n in self.api.nodes()
        ]
        if precheck.fits(need, job.num_workers, nodes):
            return []
        missing = precheck.shortfall(need, job.num_workers, nodes)
        what = precheck.describe(need, job.num_workers)
        if self.name == "local":
            raise BadInput(f"{job.job_file}: {what} can never fit on the embedded cluster ({missing})")
        scaler = self.api.has_autoscaler()
        if scaler is False:
            raise BadInput(
                f"{job.job_file}: {what} can never fit on {self.address} ({missing}) and the cluster has no autoscaler"
            )
        if scaler is None:
            return [f"{what} does not fit the cluster's current nodes ({missing}); it will wait for new nodes"]
        return [f"{what} needs the autoscaler to add nodes ({missing}); the job will be PENDING until they join"]

    # -- run control ---------------------------------------------------------------------------
    def submit(self, request: RayJobRequest) -> SubmitResult:
        existing = self.api.job(request.submission_id)
        if existing is not None:
            return SubmitResult(self._info(existing), created=False)
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise RtjobError("submitting to Ray needs Ray: pip install 'rtjob[ray]'") from None
        import logging

        # Ray logs every packaging step at INFO/WARNING; rtjob reports what matters itself.
        for name in ("ray", "ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging"):
            logging.getLogger(name).setLevel(logging.ERROR)
        try:
            client = JobSubmissionClient(
                self.address, headers=self.api.headers, verify=self.api.verify, create_cluster_if_needed=False
            )
            # A cluster that just started answers 500 "No available agent" until its job agent is up.
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.submit_job(
                        entrypoint=request.entrypoint,
                        submission_id=request.submission_id,
                        runtime_env=request.runtime_env,
                        metadata=request.metadata,
                        entrypoint_num_cpus=request.entrypoint_num_cpus,
                    )
                    break
                except RuntimeError as exc:
                    if "No available agent" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
        except ConnectionError as exc:
            raise Unreachable(f"cannot reach the Ray cluster at {self.address}: {str(exc).splitlines()[0][:200]}") from None
        except RuntimeError as exc:
            text = str(exc)
            if "already exists" in text:  # lost a race with another submit of the same id
                existing = self.api.job(request.submission_id)
                if existing is not None:
                    return SubmitResult(self._info(existing), created=False)
            if "401" in text or "403" in text or "Unauthorized" in text:
                raise Unreachable(f"authentication failed at {self.address}: {text.splitlines()[0][:200]}") from None
            raise RtjobError(f"submit failed: {text.strip().splitlines()[-1][:300]}") from None
        return SubmitResult(self.status(request.submission_id), created=True)

    def _info(self, data: dict[str, Any]) -> RunInfo:
        meta = data.get("metadata") or {}
        try:
            status = RunStatus(data.get("status", "UNKNOWN"))
        except ValueError:
            status = RunStatus.UNKNOWN
        env = ((data.get("runtime_env") or {}).get("env_vars")) or {}
        return RunInfo(
            id=data.get("submission_id") or data.get("job_id") or "",
            job=meta.get(META_JOB),
            backend=self.name,
            status=status,
            message=data.get("message"),
            start_time=iso_time(data.get("start_time")),
            end_time=iso_time(data.get("end_time")),
            storage_uri=meta.get(META_STORAGE),
            storage_endpoint=meta.get(META_STORAGE_ENDPOINT),
            exit_code=data.get("driver_exit_code"),
            address=self.address,
            entrypoint=data.get("entrypoint"),
            secrets=secret_values(env),
        )

    def find(self, run_id: str) -> RunInfo | None:
        data = self.api.job(run_id)
        return self._info(data) if data is not None else None

    def status(self, run_id: str) -> RunInfo:
        data = self.api.job(run_id)
        if data is None:
            raise BadInput(f"no run {run_id!r} at {self.address} (rtjob list shows the runs there)")
        return self._info(data)

    def list(self) -> list[RunInfo]:
        runs = [self._info(d) for d in self.api.jobs() if d.get("type", "SUBMISSION") == "SUBMISSION"]
        return sorted(runs, key=lambda r: r.start_time or "", reverse=True)

    def stop(self, run_id: str, wait_s: float = 30.0) -> RunInfo:
        info = self.status(run_id)
        if info.status.terminal:
            return info
        self.api.stop(run_id)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            info = self.status(run_id)
            if info.status.terminal:
                break
            time.sleep(0.5)
        return info

    def logs(self, run_id: str) -> str:
        return self.api.logs(run_id)

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        """The driver log from its start. Prefers the State API's log stream (polls the file every
        0.1 s) over the Jobs API websocket (which sleeps about 2 s between bursts); both replay the
        log from the beginning on every connection."""
        import aiohttp

        ssl: Any = None if self.api.verify else False
        async with aiohttp.ClientSession(headers=self.api.headers) as session:
            async with session.get(f"{self.address}/api/jobs/{run_id}", ssl=ssl) as resp:
                node_id = (await resp.json()).get("driver_node_id") if resp.status == 200 else None
            if node_id:
                params = {"node_id": node_id, "filename": f"job-driver-{run_id}.log", "lines": "-1",
                          "interval": "0.1"}
                async with session.get(f"{self.address}/api/v0/logs/stream", params=params, ssl=ssl,
                                       timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
                    if resp.status == 200:
                        import codecs

                        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # chunks split characters
                        async for chunk in resp.content.iter_any():
                            yield decoder.decode(chunk)
                        return
            async with session.ws_connect(self.api.ws_url(f"/api/jobs/{run_id}/logs/tail"), ssl=ssl,
                                          heartbeat=20) as ws:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        yield msg.data
                    elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break


def _stderr(message: str) -> None:
    import sys

    print(f"rtjob: {message}", file=sys.stderr, flush=True)



