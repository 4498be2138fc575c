"""The Anyscale backend: the same job spec as an Anyscale JobConfig, sent and followed with the anyscale SDK.

The adapter is thin on purpose. It builds plain JobConfig / ScheduleConfig / ComputeConfig data and calls
the SDK's public classes (JobSDK, ScheduleSDK, ComputeConfigSDK) with one client. That client is the
injection point: tests pass the SDK's own FakeAnyscaleClient and FakeTimer; real use builds the SDK's
default client, which authenticates the SDK's usual way (ANYSCALE_CLI_TOKEN, else
~/.anyscale/credentials.json). Injecting a client is private API, so `anyscale` is pinned (0.26.112).

It is imported only when a request is validated or sent (importing anyscale takes seconds), so
`rtjob --help` and the Ray backends never pay for it.

Run ids: an Anyscale job's *name* is rtjob's run id (``rtjob-ddp-resnet-20261122-...`` or the
``--submission-id``), so `rtjob status/logs/wait/stop RUN_ID` work as on Ray, and a submit with an
existing id attaches instead of submitting twice. Anyscale's own job ids (``prodjob_...``) work too; runs
rtjob did not submit (scheduled runs, jobs from the console) are listed under those ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, ClassVar

import rtjob_contract as contract

from ...core.errors import BadInput, RtjobError
from ...core.model import RunInfo, RunStatus, SubmitResult
from ...core.redact import secret_arg_values, secret_values
from ...jobspec.pricing import HourlyCost, compute_config_cost
from ..base import Backend, Planned, Request, last_lines
from . import client as sdk_client
from .client import _not_found, anyscale_errors, host, iso_time, state_name
from .request import (
    REGISTERED_PREFIX,
    AnyscaleJobRequest,
    build,
    job_config,
    masked_config,
    masked_names,
    render_yaml,
    sent_config,
)

if TYPE_CHECKING:
    from ...jobspec.resolve import Placement, ResolvedJob
    from ...jobspec.settings import Settings
    from .compute_configs import AnyscaleComputeConfigs
    from .queue import AnyscaleJobQueues
    from .schedules import AnyscaleSchedules

_STATES = {
    "STARTING": RunStatus.PENDING,
    "RUNNING": RunStatus.RUNNING,
    "SUCCEEDED": RunStatus.SUCCEEDED,
    "FAILED": RunStatus.FAILED,
    "TERMINATED": RunStatus.STOPPED,
    "UNKNOWN": RunStatus.UNKNOWN,
}


def _recorded_rate(tags: dict[str, Any]) -> dict[str, Any] | None:
    """The rate rtjob recorded in the job's tags at submit (``LOW`` or ``LOW-HIGH`` USD per hour)."""
    low, _, high = str(tags.get(contract.TAG_RATE) or "").partition("-")
    try:
        return {"usd_per_hour_min": float(low), "usd_per_hour_max": float(high or low),
                "source": "rate recorded at submit"}
    except ValueError:
        return None


def _hosts_pipeline(status: Any) -> bool:
    """Whether the job (a JobStatus) hosts a pipeline's supervisor (the SDK's status carries env, not tags)."""
    return bool(dict(getattr(status.config, "env_vars", None) or {}).get(contract.ENV_PIPELINE_STEPS))


class AnyscaleBackend(Backend):
    name = "anyscale"
    carries_pipelines = True
    # A pipeline's job runs on a Ray cluster: the Ray backend's loop carries its steps.
    supervisor_backend: ClassVar[str | None] = "ray"
    pipeline_steps_inside = queues_itself = True
    ci_secrets = (("ANYSCALE_CLI_TOKEN", "an Anyscale API key (the SDK reads it; never printed)"),)
    ci_extra = "anyscale,s3"
    # Anyscale's API is polled at most this often per run (follow asks every second).
    status_poll_s = 5.0
    log_poll_s = 5.0
    stop_wait_s = 30.0
    list_limit = 50

    def __init__(self, settings: Settings | None = None, client: Any | None = None, timer: Any | None = None) -> None:
        """``client``: an AnyscaleClientInterface (tests: the SDK's FakeAnyscaleClient); None builds the
        SDK's default client from the environment on first use. ``timer``: the SDK's Timer (tests:
        FakeTimer), used only by the SDK's own waits."""
        super().__init__(settings)  # type: ignore[arg-type]  # only cloud/project concern Anyscale
        self._client = client
        self._timer = timer
        self._sdks: dict[str, Any] | None = None
        self._ids: dict[str, str] = {}  # rtjob run id → Anyscale job id
        self._cache: dict[str, tuple[float, Any]] = {}  # Anyscale job id → (when, JobStatus)
        self._address = host()

    @classmethod
    def placement(cls) -> Placement:
        from ...jobspec.resolve import Placement, Registered

        # Anyscale takes registered compute configs and pins the worker group to --nodes (min = max).
        return Placement(cls.name, registered=Registered(REGISTERED_PREFIX, "Anyscale", cls.name),
                         sizes_worker_group=True)

    @property
    def address(self) -> str:
        return self._address

    @property
    def display_address(self) -> str:
        return f"Anyscale ({self._address})"

    def _sdk(self, kind: str) -> Any:
        if self._sdks is None:
            client = self._client if self._client is not None else sdk_client.default_client()
            from anyscale.cli_logger import BlockLogger
            from anyscale.compute_config import ComputeConfigSDK
            from anyscale.job import JobSDK
            from anyscale.schedule import ScheduleSDK

            logger = BlockLogger(log_output=False)  # rtjob prints what matters itself
            timer = self._timer or sdk_client.default_timer()
            self._sdks = {
                "job": JobSDK(client=client, logger=logger, timer=timer),
                "schedule": ScheduleSDK(client=client, logger=logger, timer=timer),
                "compute_config": ComputeConfigSDK(client=client, logger=logger, timer=timer),
            }
        return self._sdks[kind]

    # -- plan / render -------------------------------------------------------------------------
    def plan(self, job: ResolvedJob, cost: HourlyCost | None) -> Planned:
        from ..packaging import check_upload

        settings = self.settings
        config = job_config(job, cost, settings.get("cloud") if settings else None,
                            settings.get("project") if settings else None)
        # Anyscale packs the working dir as Ray does, with the excludes of the JobConfig; no 100 MiB limit. A link
        # out of the working dir is refused before anything is sent.
        size = check_upload(job.working_dir, config["excludes"], job.job_file, limit=None)
        return Planned(build(job, config), size.as_upload(str(job.working_dir)))

    def render(self, request: Request) -> dict[str, Any]:
        assert isinstance(request, AnyscaleJobRequest)
        return {
            "backend": self.name,
            "address": self.address,
            "job_config": masked_config(request.config, request.sealed_names()),
            "checked_with": request.checked_with,
        }

    def render_file(self, request: Request) -> str:
        assert isinstance(request, AnyscaleJobRequest)
        return render_yaml(request, self.equivalent_command(request))

    def equivalent_command(self, request: Request) -> str:
        assert isinstance(request, AnyscaleJobRequest)
        parts = ["anyscale", "job", "submit", "-f", f"{request.run_id}.yaml"]
        parts += [f'--env {name}="${name}"' for name in masked_names(request.config)]
        return " ".join(parts) + "   # the file: this request as `--output yaml`"

    def precheck(self, job: ResolvedJob) -> list[str]:
        """Anyscale starts the nodes the compute config asks for: nothing to check against a live cluster
        (resolve already refused a worker that no node of the group can hold)."""
        del job
        return []

    # -- run control ---------------------------------------------------------------------------
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:  # noqa: D102
        return anyscale_errors(what)

    def _lookup(self, run_id: str) -> Any | None:
        """The JobStatus of a run: by rtjob run id (the job's name, newest first), else by Anyscale job id."""
        sdk = self._sdk("job")
        job_id = self._ids.get(run_id)
        status = None
        with self._errors(f"reading run {run_id}"):
            if job_id is None and not run_id.startswith("prodjob_"):
                matches = [s for s in sdk.list(name=run_id, max_items=20) if s.name == run_id]
                if matches:
                    status = max(matches, key=lambda s: iso_time(s.created_at) or "")
            if status is None:
                try:
                    status = sdk.status(id=job_id or run_id)
                except RuntimeError as exc:
                    if _not_found(exc):
                        return None
                    raise
        self._ids[run_id] = status.id
        return status

    def _status_model(self, run_id: str, fresh: bool = False) -> Any:
        job_id = self._ids.get(run_id)
        cached = self._cache.get(job_id) if job_id else None
        if cached is not None and not fresh:
            when, status = cached
            if _STATES.get(state_name(status.state), RunStatus.UNKNOWN).terminal or (
                time.monotonic() - when < self.status_poll_s
            ):
                return status
        status = self._lookup(run_id)
        if status is None:
            raise BadInput(f"no run {run_id!r} on Anyscale ({self.address}); rtjob list --backend anyscale shows yours")
        self._cache[status.id] = (time.monotonic(), status)
        return status

    def _info(self, status: Any) -> RunInfo:
        config = status.config
        env = dict(getattr(config, "env_vars", None) or {})
        tags = dict(getattr(config, "tags", None) or {})
        hosts_pipeline = _hosts_pipeline(status)
        # rtjob's runs and the jobs hosting its pipelines go by their names; a schedule's runs by their job ids
        own_run = env.get(contract.ENV_RUN_NAME) == status.name or (hosts_pipeline and not env.get(contract.ENV_SCHEDULE))
        run_id = status.name if own_run else status.id
        storage = None
        if hosts_pipeline and env.get(contract.ENV_RUN_URI):  # a scheduled one's folder: named after its job id
            planned = env.get(contract.ENV_PLANNED_ID)
            storage = env[contract.ENV_RUN_URI].replace(planned, status.id) if planned else env[contract.ENV_RUN_URI]
        storage_path = env.get(contract.ENV_STORAGE_PATH)
        if storage_path and storage is None:
            if own_run:
                storage = f"{storage_path}/{status.name}"
            elif env.get(contract.ENV_SCHEDULE):  # a scheduled run names its folder after its Anyscale job id
                storage = f"{storage_path}/{status.id}"
        state = state_name(status.state)
        run_status = _STATES.get(state, RunStatus.UNKNOWN)
        runs = list(status.runs or [])
        message = f"Anyscale job {status.id} {state}"
        if runs:
            failed = sum(1 for r in runs if state_name(r.state) == "FAILED")
            message += f": {len(runs)} attempt(s)" + (f", {failed} failed" if failed else "")
            if getattr(config, "max_retries", None) is not None:
                message += f" (max_retries={config.max_retries})"
        return RunInfo(
            id=run_id,
            job=env.get(contract.ENV_JOB_NAME),
            backend=self.name,
            status=run_status,
            message=message,
            start_time=iso_time(status.created_at),
            end_time=iso_time(status.status_updated_at) if run_status.terminal else None,
            storage_uri=storage,
            exit_code=None,  # Anyscale does not report the entrypoint's exit code
            address=f"{self.address}/jobs/{status.id}",
            entrypoint=getattr(config, "entrypoint", None),
            secrets=secret_values(env) + secret_arg_values(str(getattr(config, "entrypoint", "") or "")),
            rate=_recorded_rate(tags),
        )

    def _submit_new(self, request: Request) -> SubmitResult:
        assert isinstance(request, AnyscaleJobRequest)
        from anyscale.job.models import JobConfig

        with sent_config(request) as config, anyscale_errors(f"submitting {request.run_id}", request.secrets()):
            job_id = self._sdk("job").submit(JobConfig.from_dict(config))  # its sealed package uploaded with it
        self._ids[request.run_id] = job_id
        return SubmitResult(self._info(self._status_model(request.run_id, fresh=True)), created=True)

    def find(self, run_id: str) -> RunInfo | None:
        status = self._lookup(run_id)
        if status is None:
            return None
        self._cache[status.id] = (time.monotonic(), status)
        return self._info(status)

    def status(self, run_id: str) -> RunInfo:
        return self._info(self._status_model(run_id))

    def _list(self) -> list[RunInfo]:
        with self._errors("listing jobs"):
            statuses = list(self._sdk("job").list(max_items=self.list_limit))
        # a pipeline's supervisor job is rtjob's, not a run of the user's (the pipeline's record lists it)
        return [self._info(s) for s in statuses if not _hosts_pipeline(s)  # <id>-supervisor: the pipeline's record
                or (s.config.env_vars or {}).get(contract.ENV_SCHEDULE)]  # a schedule's run: the pipeline run itself

    def _stop_running(self, run_id: str) -> RunInfo:
        status = self._status_model(run_id)  # just read by stop
        from anyscale.job.models import JobState

        sdk = self._sdk("job")
        with self._errors(f"stopping {run_id}"):
            sdk.terminate(id=status.id)
            try:  # the SDK's wait, always with our own limit (its default is 30 minutes)
                sdk.wait(id=status.id, state=JobState.TERMINATED, timeout_s=self.stop_wait_s)
            except TimeoutError:
                pass  # still stopping: report what it is now
            except RuntimeError as exc:
                if "terminal state" not in str(exc):  # it ended some other way first (e.g. SUCCEEDED)
                    raise
        return self._info(self._status_model(run_id, fresh=True))

    def logs(self, run_id: str) -> str:
        status = self._status_model(run_id)
        if not status.runs:  # nothing has started yet: there is no log to read
            return ""
        with self._errors(f"reading the log of {run_id}"):
            text = self._sdk("job").get_logs(id=status.id)
        return text or ""

    def last_lines(self, run_id: str, lines: int) -> str:
        status = self._status_model(run_id)
        if not status.runs:
            return ""
        with self._errors(f"reading the log of {run_id}"):  # the SDK tails on the server
            text = self._sdk("job").get_logs(id=status.id, mode="TAIL", max_lines=lines)
        return last_lines(text or "", lines)

    def _delete_ended(self, run_id: str) -> None:
        status = self._status_model(run_id)  # just read by delete
        with self._errors(f"deleting run {run_id}"):
            self._sdk("job").delete(id=status.id)

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        """Anyscale has no log stream in the SDK: each 'connection' is one read of the whole log, after
        which follow reconnects and skips the lines it already printed."""
        text = await asyncio.to_thread(self.logs, run_id)
        if text:
            yield text
        await asyncio.sleep(self.log_poll_s)

    # -- a pipeline: one Anyscale job whose driver is its supervisor (pipeline.py) ---------------------------
    def check_pipeline(self, requests: list[Request], where: str) -> None:
        from .pipeline import check_steps

        check_steps([r for r in requests if isinstance(r, AnyscaleJobRequest)], where)

    def _pipeline_request(self, pipeline_id: str, storage_uri: str | None, job: str,
                          requests: list[Request]) -> AnyscaleJobRequest:
        from .pipeline import pipeline_request

        return pipeline_request(pipeline_id, storage_uri, job, [r for r in requests if isinstance(r, AnyscaleJobRequest)],
                                str(self.supervisor_backend))

    def supervise_pipeline(self, pipeline_id: str, storage_uri: str | None, job: str, requests: list[Request],
                           queued: dict[str, dict[str, Any]] | None = None) -> RunInfo | None:
        """Submit the pipeline's Anyscale job (a second submit attaches); never ``queued``: Anyscale queues it."""
        return self.submit(self._pipeline_request(pipeline_id, storage_uri, job, requests)).run

    def pipeline_supervisor_preview(self, pipeline_id: str, storage_uri: str | None, job: str,
                                    requests: list[Request]) -> dict[str, Any] | None:
        return self.render(self._pipeline_request(pipeline_id, storage_uri, job, requests))  # masked: masked_config

    def pipeline_file(self, pipeline_id: str, storage_uri: str | None, job: str, requests: list[Request]) -> str:
        return self.render_file(self._pipeline_request(pipeline_id, storage_uri, job, requests))

    def supervisor_of(self, run_id: str) -> RunInfo | None:
        """The Anyscale job hosting pipeline ``run_id``'s supervisor (None: a plain run, which Anyscale retries)."""
        from .pipeline import supervisor_name

        if run_id.endswith(contract.SUPERVISOR_SUFFIX):
            return None
        known = self._cache.get(self._ids.get(run_id, ""))
        if known is not None and not _hosts_pipeline(known[1]):
            return None  # a plain run this backend has just read: no second call to Anyscale for `status`
        # A scheduled pipeline's run id is the id of the job that hosts it; else that job is <id>-supervisor.
        status = self._lookup(run_id if run_id.startswith("prodjob_") else supervisor_name(run_id))
        if status is None or not _hosts_pipeline(status) or (status.name != supervisor_name(run_id)
                                                             and status.id != run_id):
            return None
        self._cache[status.id] = (time.monotonic(), status)
        return self._info(status)

    def supervise(self, run_id: str) -> RunInfo | None:
        """Anyscale restarts the job hosting a supervisor itself (its max_retries): nothing to replace here."""
        return self.supervisor_of(run_id)

    # -- cost ----------------------------------------------------------------------------------
    def hourly_cost(self, info: RunInfo) -> HourlyCost | None:
        """The rate of the cluster the run asked for: its compute config as Anyscale recorded it with the job
        (a run that Anyscale still knows), else the rate rtjob recorded in its tags at submit."""
        recorded = super().hourly_cost(info)
        if recorded is not None:
            return recorded
        try:
            compute = self._status_model(info.id).config.compute_config
            if isinstance(compute, str):
                with self._errors(f"reading compute config {compute}"):
                    compute = self._sdk("compute_config").get(compute).config
        except RtjobError:
            return None
        data = compute.to_dict() if hasattr(compute, "to_dict") else compute
        if not isinstance(data, dict) or "configs" in data:  # multi-resource configs: not priced
            return None
        return compute_config_cost(data)

    # -- compute configs, schedules, job queues (capabilities: compute_configs.py, schedules.py, queue.py) -----
    def compute_configs(self) -> AnyscaleComputeConfigs:
        from .compute_configs import AnyscaleComputeConfigs

        return AnyscaleComputeConfigs(self)

    def schedules(self) -> AnyscaleSchedules:
        from .schedules import AnyscaleSchedules

        return AnyscaleSchedules(self)

    def job_queues(self) -> AnyscaleJobQueues:
        from .queue import AnyscaleJobQueues

        return AnyscaleJobQueues(self)
