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
import builtins
import contextlib
import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cost import HourlyCost, compute_config_cost, pinned_compute_config
from ..errors import BadInput, RtjobError, Unreachable
from ..masking import MASK, is_secret, mask_mapping, redact, secret_values
from .base import RunInfo, RunStatus, SubmitResult

if TYPE_CHECKING:
    from ..project import Settings
    from ..resolve import ResolvedJob

ANYSCALE_VERSION = "0.26.112"  # the SDK this adapter was written and tested against (pinned in pyproject)
DEFAULT_HOST = "https://console.anyscale.com"
CREDENTIALS_ENV = "ANYSCALE_CLI_TOKEN"
CREDENTIALS_FILE = "~/.anyscale/credentials.json"
REGISTERED_PREFIX = "anyscale:"  # same as resolve.REGISTERED_PREFIX (resolve is not imported here)
# Tags on every job rtjob submits (Anyscale's job list can filter on them).
TAG_RUN_ID, TAG_JOB, TAG_STORAGE = "rtjob-run-id", "rtjob-job", "rtjob-storage"
# Ray's default working-dir excludes, always sent explicitly (Anyscale packages the dir like Ray does).
DEFAULT_EXCLUDES = [".git", ".venv", "venv", "__pycache__"]

_STATES = {
    "STARTING": RunStatus.PENDING,
    "RUNNING": RunStatus.RUNNING,
    "SUCCEEDED": RunStatus.SUCCEEDED,
    "FAILED": RunStatus.FAILED,
    "TERMINATED": RunStatus.STOPPED,
    "UNKNOWN": RunStatus.UNKNOWN,
}


def host() -> str:
    return (os.environ.get("ANYSCALE_HOST") or DEFAULT_HOST).rstrip("/")


def credentials_source() -> str | None:
    """Where the SDK will find a token (the SDK's own order), or None."""
    if os.environ.get(CREDENTIALS_ENV):
        return f"env {CREDENTIALS_ENV}"
    if Path(CREDENTIALS_FILE).expanduser().is_file():
        return CREDENTIALS_FILE
    return None


def _token() -> list[str]:
    token = os.environ.get(CREDENTIALS_ENV) or ""
    return [token] if len(token) >= 4 else []


# ---------------------------------------------------------------------------------------------
# errors: every SDK failure becomes one line with rtjob's exit code


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 6:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _is_connection_error(exc: BaseException) -> bool:
    import requests
    import urllib3

    return isinstance(exc, (ConnectionError, requests.exceptions.ConnectionError, urllib3.exceptions.HTTPError))


def _first_line(exc: BaseException) -> str:
    fmt = getattr(exc, "format_message", None)  # click.ClickException, which the SDK's auth raises
    text = str(fmt() if callable(fmt) else exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def translate(exc: BaseException, what: str, secrets: Iterable[str] = ()) -> RtjobError:
    """An SDK / API exception as rtjob's error: auth and network → exit 3; bad names, missing runs,
    configs the SDK's models reject → exit 2; anything else → exit 1. Secrets are redacted."""
    hide = [*_token(), *secrets]
    chain = _chain(exc)
    text = redact(_first_line(exc), hide)
    status = next((s for s in (getattr(e, "status", None) for e in chain) if isinstance(s, int)), None)
    if status in (401, 403) or any(type(e).__name__ == "ClickException" for e in chain):
        cause = redact(_first_line(next(e for e in chain if getattr(e, "status", None) in (401, 403)
                                        or type(e).__name__ == "ClickException")), hide)
        return Unreachable(f"Anyscale authentication failed while {what}: {cause}")
    if any(_is_connection_error(e) for e in chain):
        return Unreachable(f"cannot reach Anyscale at {host()} while {what}: {text}")
    if type(exc).__name__ == "CloudNotFoundError" or status == 404:
        return BadInput(f"{what}: {text}")
    if isinstance(exc, (ValueError, TypeError)):
        return BadInput(f"{what}: {text}")
    if isinstance(exc, RuntimeError) and "not found" in text.lower():
        return BadInput(text)
    return RtjobError(f"Anyscale: {what} failed: {text}")


@contextlib.contextmanager
def anyscale_errors(what: str, secrets: Iterable[str] = ()) -> Iterator[None]:
    try:
        yield
    except RtjobError:
        raise
    except Exception as exc:  # noqa: BLE001 - every SDK failure becomes one line with an exit code
        raise translate(exc, what, secrets) from None


def _not_found(exc: BaseException) -> bool:
    """The SDK's 'Job with ID/name ... was not found' (it also wraps API errors that way: check the cause)."""
    if not isinstance(exc, RuntimeError) or "not found" not in str(exc):
        return False
    cause = exc.__cause__
    return cause is None or getattr(cause, "status", None) == 404


def default_timer() -> Any:
    """The SDK's real timer (its waits sleep between polls); tests use the SDK's FakeTimer."""
    from anyscale._private.sdk.timer import RealTimer

    return RealTimer()


def default_client() -> Any:
    """The SDK's real client, authenticated the SDK's usual way; no credentials → exit 3, one line."""
    if credentials_source() is None:
        raise Unreachable(
            f"no Anyscale credentials: set {CREDENTIALS_ENV} (in CI, from a secret) or run `anyscale login` "
            f"(it writes {CREDENTIALS_FILE})"
        )
    try:
        from anyscale._private.anyscale_client import AnyscaleClient
    except ImportError:
        raise RtjobError(f"the Anyscale backend needs the anyscale SDK: pip install 'rtjob[anyscale]' "
                         f"(anyscale=={ANYSCALE_VERSION})") from None
    with anyscale_errors("authenticating"):
        return AnyscaleClient()


# ---------------------------------------------------------------------------------------------
# the request: a JobConfig as plain data


def job_config(job: ResolvedJob) -> dict[str, Any]:
    """Exactly the JobConfig rtjob sends for a resolved job (secrets in the clear: render masks them)."""
    compute: dict[str, Any] | str | None = None
    if job.compute_config is not None:
        compute = pinned_compute_config(job.compute_config, job.worker_group, job.nodes)
    elif job.compute_config_name and job.compute_config_name.startswith(REGISTERED_PREFIX):
        compute = job.compute_config_name[len(REGISTERED_PREFIX):]
    tags = {**job.spec.tags, TAG_JOB: job.spec.name, TAG_RUN_ID: job.run_id}
    if job.storage_uri:
        tags[TAG_STORAGE] = job.storage_uri
    config: dict[str, Any] = {
        "name": job.run_id,
        "entrypoint": job.entrypoint,  # Anyscale enforces timeout_s itself: no `timeout` wrapper as on Ray
        "image_uri": job.spec.image_uri,  # None: the cloud's default image
        "compute_config": compute,  # None: the cloud's default compute config
        "working_dir": str(job.working_dir),
        "excludes": [*DEFAULT_EXCLUDES, *(e for e in job.spec.excludes if e not in DEFAULT_EXCLUDES)],
        "requirements": list(job.spec.requirements or []),
        "env_vars": dict(job.env_vars),
        "max_retries": job.spec.max_retries,  # explicit: unset, the SDK defaults to 1 (and warns)
        "timeout_s": job.spec.timeout_s,
        "tags": tags,
    }
    if job.spec.cloud:
        config["cloud"] = job.spec.cloud
    if job.spec.project:
        config["project"] = job.spec.project
    return config


def masked_config(config: dict[str, Any]) -> dict[str, Any]:
    out = dict(config)
    out["env_vars"] = mask_mapping(config.get("env_vars") or {})
    return out


def masked_names(config: dict[str, Any]) -> list[str]:
    env = config.get("env_vars") or {}
    return [k for k, v in env.items() if v and is_secret(k, str(v))]


def check_with_anyscale(kind: str, data: dict[str, Any], where: str) -> str | None:
    """Validate ``data`` with Anyscale's own model (JobConfig, ScheduleConfig or ComputeConfig).

    Returns what checked it, or None when the SDK is not installed; raises BadInput if the model
    rejects the data.
    """
    try:
        if kind == "JobConfig":
            from anyscale.job.models import JobConfig as model
        elif kind == "ScheduleConfig":
            from anyscale.schedule.models import ScheduleConfig as model
        else:
            from anyscale.compute_config.models import compute_config_type_from_dict

            with anyscale_errors(f"{where}: Anyscale's ComputeConfig rejects it"):
                compute_config_type_from_dict(data)
            return f"anyscale {ANYSCALE_VERSION} ComputeConfig"
    except ImportError:
        return None
    with anyscale_errors(f"{where}: Anyscale's {kind} rejects it"):
        model.from_dict(data)
    return f"anyscale {ANYSCALE_VERSION} {kind}"


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


@dataclass
class AnyscaleJobRequest:
    """What submit sends: the JobConfig fields (as plain data) for one run."""

    config: dict[str, Any]
    run_id: str
    checked_with: str | None = None  # "anyscale 0.26.112 JobConfig" once its model accepted the config
    job: ResolvedJob | None = field(default=None, repr=False)


def _iso(value: Any) -> str | None:
    if not value:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def _state_name(state: Any) -> str:
    return str(getattr(state, "value", state) or "UNKNOWN").upper()


class AnyscaleBackend:
    name = "anyscale"
    # Anyscale's API is polled at most this often per run (follow asks every second).
    status_poll_s = 5.0
    log_poll_s = 5.0
    stop_wait_s = 30.0
    list_limit = 50

    def __init__(self, client: Any | None = None, timer: Any | None = None) -> None:
        """``client``: an AnyscaleClientInterface (tests: the SDK's FakeAnyscaleClient); None builds the
        SDK's default client from the environment on first use. ``timer``: the SDK's Timer (tests:
        FakeTimer), used only by the SDK's own waits."""
        self._client = client
        self._timer = timer
        self._sdks: dict[str, Any] | None = None
        self._ids: dict[str, str] = {}  # rtjob run id → Anyscale job id
        self._cache: dict[str, tuple[float, Any]] = {}  # Anyscale job id → (when, JobStatus)
        self.address = host()
        self.display_address = f"Anyscale ({self.address})"

    @classmethod
    def from_settings(cls, settings: Settings, *, offline: bool = False) -> AnyscaleBackend:
        del settings, offline  # nothing to contact until a command needs Anyscale
        return cls()

    def _sdk(self, kind: str) -> Any:
        if self._sdks is None:
            client = self._client if self._client is not None else default_client()
            from anyscale.cli_logger import BlockLogger
            from anyscale.compute_config import ComputeConfigSDK
            from anyscale.job import JobSDK
            from anyscale.schedule import ScheduleSDK

            logger = BlockLogger(log_output=False)  # rtjob prints what matters itself
            timer = self._timer or default_timer()
            self._sdks = {
                "job": JobSDK(client=client, logger=logger, timer=timer),
                "schedule": ScheduleSDK(client=client, logger=logger, timer=timer),
                "compute_config": ComputeConfigSDK(client=client, logger=logger, timer=timer),
            }
        return self._sdks[kind]

    # -- plan / render -------------------------------------------------------------------------
    def plan(self, job: ResolvedJob) -> AnyscaleJobRequest:
        config = job_config(job)
        checked = check_with_anyscale("JobConfig", config, job.job_file)
        notes = []
        if not checked:
            notes.append("anyscale is not installed: the JobConfig was not checked with its model "
                         "(pip install 'rtjob[anyscale]')")
        group = job.worker_group
        if group is not None and job.nodes > group.max_nodes:
            notes.append(f"--nodes {job.nodes} raises {group.label}'s max_nodes from {group.max_nodes} to {job.nodes}")
        if config["compute_config"] is None:
            notes.append("no compute config: Anyscale uses the cloud's default one (its cost is not estimated)")
        elif isinstance(config["compute_config"], str):
            notes.append(f"compute config {config['compute_config']!r} is used as registered on Anyscale: its own "
                         "node counts apply (rtjob compute-config show shows it)")
        if not job.storage_uri:
            notes.append("no storage set: checkpoints stay on the cluster and end with it; set storage: "
                         "s3://bucket/prefix (or RTJOB_STORAGE, --storage)")
        if job.spec.timeout_s is None:
            notes.append("no timeout_s: the run has no time limit on Anyscale (set timeout_s in the job)")
        for note in notes:
            if note not in job.notes:
                job.notes.append(note)
        return AnyscaleJobRequest(config, job.run_id, checked, job)

    def render(self, request: AnyscaleJobRequest) -> dict[str, Any]:
        return {
            "backend": self.name,
            "address": self.address,
            "job_config": masked_config(request.config),
            "checked_with": request.checked_with,
        }

    def render_yaml(self, request: AnyscaleJobRequest) -> str:
        """The request as a file `anyscale job submit -f FILE` accepts (secret values masked)."""
        where = f" ({request.job.job_file})" if request.job else ""
        lines = [
            f"# Anyscale job config for rtjob run {request.run_id}{where}, rendered by rtjob.",
            f"# Submit it with: {self.equivalent_command(request)}",
        ]
        masked = masked_names(request.config)
        if masked:
            lines.append(f"# Masked values ({MASK}): pass them at submit time with --env NAME=value, as above.")
        if request.checked_with:
            lines.append(f"# Checked with {request.checked_with}.")
        return "\n".join(lines) + "\n" + _yaml(masked_config(request.config))

    def equivalent_command(self, request: AnyscaleJobRequest) -> str:
        parts = ["anyscale", "job", "submit", "-f", f"{request.run_id}.yaml"]
        parts += [f'--env {name}="${name}"' for name in masked_names(request.config)]
        return " ".join(parts) + "   # the file: this request as `--output yaml`"

    def precheck(self, job: ResolvedJob) -> list[str]:
        """Anyscale starts the nodes the compute config asks for: nothing to check against a live cluster
        (resolve already refused a worker that no node of the group can hold)."""
        del job
        return []

    # -- run control ---------------------------------------------------------------------------
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
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
                    status = max(matches, key=lambda s: _iso(s.created_at) or "")
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
            if _STATES.get(_state_name(status.state), RunStatus.UNKNOWN).terminal or (
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
        own_run = env.get("RTJOB_RUN_NAME") == status.name
        run_id = status.name if own_run else status.id
        storage = None
        storage_path = env.get("RTJOB_STORAGE_PATH")
        if storage_path:
            if own_run:
                storage = f"{storage_path}/{status.name}"
            elif env.get("RTJOB_SCHEDULE"):  # a scheduled run names its folder after its Anyscale job id
                storage = f"{storage_path}/{status.id}"
        state = _state_name(status.state)
        run_status = _STATES.get(state, RunStatus.UNKNOWN)
        runs = list(status.runs or [])
        message = f"Anyscale job {status.id} {state}"
        if runs:
            failed = sum(1 for r in runs if _state_name(r.state) == "FAILED")
            message += f": {len(runs)} attempt(s)" + (f", {failed} failed" if failed else "")
            if getattr(config, "max_retries", None) is not None:
                message += f" (max_retries={config.max_retries})"
        return RunInfo(
            id=run_id,
            job=env.get("RTJOB_JOB_NAME"),
            backend=self.name,
            status=run_status,
            message=message,
            start_time=_iso(status.created_at),
            end_time=_iso(status.status_updated_at) if run_status.terminal else None,
            storage_uri=storage,
            exit_code=None,  # Anyscale does not report the entrypoint's exit code
            address=f"{self.address}/jobs/{status.id}",
            entrypoint=getattr(config, "entrypoint", None),
            secrets=secret_values(env),
        )

    def submit(self, request: AnyscaleJobRequest) -> SubmitResult:
        existing = self.find(request.run_id)
        if existing is not None:
            return SubmitResult(existing, created=False)
        from anyscale.job.models import JobConfig

        secrets = secret_values(request.config.get("env_vars") or {})
        with anyscale_errors(f"submitting {request.run_id}", secrets):
            job_id = self._sdk("job").submit(JobConfig.from_dict(request.config))
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

    def list(self) -> list[RunInfo]:
        with self._errors("listing jobs"):
            statuses = list(self._sdk("job").list(max_items=self.list_limit))
        runs = [self._info(s) for s in statuses]
        return sorted(runs, key=lambda r: r.start_time or "", reverse=True)

    def stop(self, run_id: str) -> RunInfo:
        status = self._status_model(run_id, fresh=True)
        if _STATES.get(_state_name(status.state), RunStatus.UNKNOWN).terminal:
            return self._info(status)
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

    async def tail(self, run_id: str) -> AsyncIterator[str]:
        """Anyscale has no log stream in the SDK: each 'connection' is one read of the whole log, after
        which follow reconnects and skips the lines it already printed."""
        text = await asyncio.to_thread(self.logs, run_id)
        if text:
            yield text
        await asyncio.sleep(self.log_poll_s)

    # -- cost ----------------------------------------------------------------------------------
    def hourly_cost(self, run_id: str) -> HourlyCost | None:
        """The rate of the cluster a run asked for (its compute config as Anyscale reports it)."""
        try:
            compute = self._status_model(run_id).config.compute_config
            if isinstance(compute, str):
                with self._errors(f"reading compute config {compute}"):
                    compute = self._sdk("compute_config").get(compute).config
        except RtjobError:
            return None
        data = compute.to_dict() if hasattr(compute, "to_dict") else compute
        if not isinstance(data, dict) or "configs" in data:  # multi-resource configs: not priced
            return None
        return compute_config_cost(data)

    # -- compute configs and schedules ---------------------------------------------------------
    def register_compute_config(self, config: dict[str, Any], name: str) -> str:
        from anyscale.compute_config.models import compute_config_type_from_dict

        with self._errors(f"registering compute config {name}"):
            return str(self._sdk("compute_config").create(compute_config_type_from_dict(config), name=name))

    def registered_compute_config(self, name: str) -> dict[str, Any]:
        with self._errors(f"reading compute config {name}"):
            version = self._sdk("compute_config").get(name)
        config = version.config
        return config.to_dict() if hasattr(config, "to_dict") else dict(config or {})

    def apply_schedule(self, schedule: dict[str, Any]) -> str:
        from anyscale.schedule.models import ScheduleConfig

        secrets = secret_values((schedule.get("job_config") or {}).get("env_vars") or {})
        name = (schedule.get("job_config") or {}).get("name")
        with anyscale_errors(f"applying schedule {name}", secrets):
            return str(self._sdk("schedule").apply(ScheduleConfig.from_dict(schedule)))

    def schedules(self) -> builtins.list[dict[str, Any]]:
        with self._errors("listing schedules"):
            found = list(self._sdk("schedule").list(max_items=100))
        out = []
        for s in found:
            job_config = s.config.job_config
            env = dict(getattr(job_config, "env_vars", None) or {})
            out.append({
                "id": s.id,
                "name": s.name,
                "state": _state_name(s.state),
                "cron": s.config.cron_expression,
                "timezone": s.config.timezone,
                "job": env.get("RTJOB_JOB_NAME"),
            })
        return sorted(out, key=lambda row: row["name"])

    def set_schedule_state(self, name: str, enabled: bool) -> str:
        from anyscale.schedule.models import ScheduleState

        state = ScheduleState.ENABLED if enabled else ScheduleState.DISABLED
        with self._errors(f"{'resuming' if enabled else 'pausing'} schedule {name}"):
            return str(self._sdk("schedule").set_state(name=name, state=state))

    def schedule_state(self, name: str) -> str:
        with self._errors(f"reading schedule {name}"):
            return _state_name(self._sdk("schedule").status(name=name).state)

    def trigger_schedule(self, name: str) -> str:
        with self._errors(f"triggering schedule {name}"):
            return str(self._sdk("schedule").trigger(name=name))

    def delete_schedule(self, name: str) -> str:
        with self._errors(f"deleting schedule {name}"):
            return str(self._sdk("schedule").delete(name=name))
