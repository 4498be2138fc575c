"""The contract every backend keeps: one abstract class that declares every capability.

Compare TorchX's ``Scheduler``: ``submit_dryrun`` → request → ``schedule``, ``describe``, ``list``, ``cancel``,
``log_iter``. Here: ``plan`` (pure) → a plain request → ``submit``, ``find``/``status``, ``list``, ``stop``,
``logs``/``tail``, ``delete``; plus what rtjob adds on top (attempts and retries, the hourly rate, a file for the peer's
own CLI). A capability a backend does not have raises ``NotSupported`` (one line, exit 2) or answers None,
as its docstring says: callers never probe a backend with ``getattr``. Optional capabilities that have commands of
their own (schedules, registered compute configs, a cluster on this machine) are objects a backend hands out
(backends/capabilities.py); the registry finds the backend that offers one.

Policy every backend shares is written once here, as template methods (TorchX's ``cancel`` → ``_cancel_existing``):
``submit`` attaches to a run whose id exists (``_submit_new`` sends), ``stop`` returns at once for an ended run
(``_stop_running``), ``delete`` refuses one not ended (``_delete_ended``), ``list`` is newest first (``_list``).
"""

from __future__ import annotations

import builtins
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.errors import BadInput
from ..core.model import Attempts, RunInfo, SubmitResult
from .request import Log, Request

if TYPE_CHECKING:  # the spec layer pulls in pydantic: not needed to print a status
    from ..jobspec.pricing import HourlyCost
    from ..jobspec.resolve import Placement, ResolvedJob
    from ..jobspec.settings import Settings
    from .capabilities import ComputeConfigs, JobQueues, LocalCluster, Schedules

@dataclass(frozen=True)
class JobState:
    """A run's attempt as the supervisor's loop sees it on its cluster (``ClusterJobs.state``)."""

    id: str
    status: str  # PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED (the backend's word for anything else)
    root: str  # the run's first attempt's id
    attempt: int  # 1: the first
    max_retries: int
    retry_reason: str | None  # why the one retry rule (core/retry_rule.py) retries this end; None: it does not


class ClusterJobs(ABC):
    """What the supervisor's loop (runside/supervisor/loop.py) asks of the cluster it runs on, from inside it: the
    backend's primitives (``Backend.cluster_jobs``). The loop decides; these read and act."""

    @abstractmethod
    def state(self, run_id: str) -> JobState | None:
        """The attempt now; None: the cluster does not know it. A fault that may pass raises RtjobError."""

    @abstractmethod
    def latest_attempt(self, run_id: str) -> str:
        """The id of the run's latest attempt (a client, or an earlier supervisor, may have retried it)."""

    @abstractmethod
    def missing_code(self, run_id: str) -> list[str]:
        """What of the attempt's uploaded code the cluster no longer has (a retry could not run): named."""

    @abstractmethod
    def resubmit(self, run_id: str) -> tuple[str, bool]:
        """The attempt after ``run_id`` submitted, or attached to where it exists: its id, and whether it was
        created by this call."""

    @abstractmethod
    def stop(self, run_id: str) -> None:
        """Ask the cluster to stop the attempt (returns at once)."""

    @abstractmethod
    def given_up_line(self, run_id: str, what: str) -> str | None:
        """Why this supervisor gives the run (``what``: "run" or "pipeline") up without carrying it: its
        supervisors kept dying; None: it carries it."""

    @abstractmethod
    def steps(self) -> list[dict[str, Any]]:
        """A pipeline's steps, as its supervisor was started with them (each the cluster's request for it)."""

    @abstractmethod
    def step_id(self, step: dict[str, Any]) -> str:
        """The run id of a step."""

    @abstractmethod
    def step_missing_code(self, step: dict[str, Any]) -> list[str]:
        """What of the step's uploaded code the cluster no longer has: named."""

    @abstractmethod
    def submit_step(self, step: dict[str, Any]) -> bool:
        """Submit the step, or attach to it where it exists; whether this call created it."""


class NotSupported(BadInput):
    """The backend has no such capability (exit 2: the request, not the run, is wrong)."""


@dataclass(frozen=True)
class Upload:
    """What a submit uploads from this machine: the job's working dir, as the platform packs it."""

    working_dir: str
    files: int
    bytes: int
    # What `render --files` lists, from the same walk: (path, size) uploaded, (path, rule) left out.
    listed: tuple[tuple[str, int], ...] = dataclasses.field(default=(), repr=False)
    excluded: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"working_dir": self.working_dir, "files": self.files, "bytes": self.bytes}

    def describe(self) -> str:
        """'/path (12 files, 4.5 KiB)': what render shows and submit says before it uploads."""
        size = f"{self.bytes / 1024**2:.1f} MiB" if self.bytes >= 1024**2 else f"{self.bytes / 1024:.1f} KiB"
        return f"{self.working_dir} ({self.files} files, {size})"


@dataclass(frozen=True)
class Planned:
    """What ``Backend.plan`` decided: the exact request, and the upload it measured on the way (None: nothing
    is uploaded from this machine)."""

    request: Request
    upload: Upload | None


@dataclass
class Retry:
    """What a backend decided about a FAILED run (``Backend.retry``)."""

    failed_id: str
    reason: str | None  # why it is retriable; None: it is not (an ordinary failure)
    attempt: int  # the failed attempt's number (1 = the original submission)
    max_retries: int
    next_run: RunInfo | None = None  # the retry, submitted or attached to (None: no retries left / none due)
    created: bool = False  # False: another rtjob process had submitted this retry already


@dataclass
class Stuck:
    """A run that waits for resources its cluster does not have (``Backend.stuck``)."""

    reason: str  # what it waits for, e.g. '{GPU: 1} × 2 (placement group) that this cluster does not have (...)'
    final: bool  # True: no node can join (the embedded cluster, no autoscaler): waiting is in vain


def last_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` (a trailing newline kept, not counted as a line)."""
    kept = text.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return "".join(kept)


class Backend(ABC):
    """A place runs happen. Constructed from settings without any I/O; the first call that needs the
    cluster (or ``prepare``) connects."""

    name: ClassVar[str]
    # For `rtjob schedule render --github`: the secrets a CI workflow needs (name, what it holds), the extra it installs.
    ci_secrets: ClassVar[tuple[tuple[str, str], ...]] = ()
    ci_extra: ClassVar[str] = ""
    # A pipeline's steps run on with no client alive (a supervisor on the cluster: supervise_pipeline).
    carries_pipelines: ClassVar[bool] = False
    # The registered backend whose ``cluster_jobs`` the supervisor's loop uses on the cluster for this backend's runs:
    # the BACKEND of `python -m rtjob.runside.supervisor RUN_ID BACKEND`; None: its runs have no supervisor.
    supervisor_backend: ClassVar[str | None] = None
    # The steps run inside the job that hosts the pipeline's supervisor (one Anyscale job): the backend sees that
    # job, not the steps, whose status and logs come from their records in storage.
    pipeline_steps_inside: ClassVar[bool] = False
    queues_itself: ClassVar[bool] = False  # its platform keeps a queued run's queue (Anyscale's job queues), not a keeper

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    @abstractmethod
    def placement(cls) -> Placement:
        """What resolving a job needs to know about this backend (embedded?, the prefix of compute configs its
        platform registers?, default storage). ``backends.placement_for`` adds the other backends' prefixes."""

    # -- where ------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def address(self) -> str:
        """The endpoint runs are sent to (no credentials in it)."""

    @property
    def display_address(self) -> str:
        """The address as people read it (e.g. 'Anyscale (https://...)')."""
        return self.address

    # -- plan and render (pure) ---------------------------------------------------------------------
    @abstractmethod
    def plan(self, job: ResolvedJob, cost: HourlyCost | None) -> Planned:
        """The exact request ``submit`` will send, and what it uploads from this machine (the working dir,
        measured once, as the platform packs it). ``cost``: the job's estimated rate (runs/runner.plan works it
        out once), recorded with the run where the backend keeps metadata. Pure: no mutation of ``job``, no I/O
        except reading the job's working dir once; raises BadInput for a working dir the platform would refuse
        or that would ship files from outside it."""

    @abstractmethod
    def render(self, request: Request) -> dict[str, Any]:
        """The request as JSON-able data, secrets masked (render, --dry-run)."""

    @abstractmethod
    def equivalent_command(self, request: Request) -> str:
        """The peer CLI command that sends the same request (secrets masked)."""

    def render_file(self, request: Request) -> str:
        """The request as a file the peer's own CLI accepts (render --output yaml)."""
        raise NotSupported(f"--output yaml: backend {self.name!r} has no job file of its own (use json)")

    # -- before submit ------------------------------------------------------------------------------
    def prepare(self, job: ResolvedJob, log: Log) -> None:
        """Make the backend ready to run ``job`` (the embedded cluster starts or grows here)."""
        del job, log

    @abstractmethod
    def precheck(self, job: ResolvedJob) -> list[str]:
        """Raise BadInput if the job can never fit; return warnings (e.g. it needs the autoscaler)."""

    # -- run control --------------------------------------------------------------------------------
    def submit(self, request: Request) -> SubmitResult:
        """Send the request; a run with its id already there is attached to, not submitted again."""
        existing = self.find(request.run_id)
        if existing is not None:
            return SubmitResult(existing, created=False)
        return self._submit_new(request)

    @abstractmethod
    def _submit_new(self, request: Request) -> SubmitResult:
        """Send a request whose run id the backend did not know a moment ago."""

    @abstractmethod
    def find(self, run_id: str) -> RunInfo | None:
        """The run, or None if the backend does not know it."""

    @abstractmethod
    def status(self, run_id: str) -> RunInfo:
        """The run; BadInput if the backend does not know it."""

    def list(self) -> list[RunInfo]:
        """The runs the backend knows now, newest first."""
        return sorted(self._list(), key=lambda run: run.start_time or "", reverse=True)

    @abstractmethod
    def _list(self) -> builtins.list[RunInfo]:
        """The runs the backend knows now, in any order."""

    def _current(self, run_id: str) -> RunInfo:
        """The run as the backend knows it this moment (not a cached answer); BadInput if it does not."""
        return self.find(run_id) or self.status(run_id)

    def stop(self, run_id: str) -> RunInfo:
        """Stop the run and wait a bounded time until it has stopped; an ended run is returned as it is."""
        info = self._current(run_id)
        if info.status.terminal:
            return info
        return self._stop_running(run_id)

    @abstractmethod
    def _stop_running(self, run_id: str) -> RunInfo:
        """Stop a run that has not ended; wait a bounded time; the run as it is then."""

    @abstractmethod
    def logs(self, run_id: str) -> str:
        """The run's whole log so far."""

    @abstractmethod
    def tail(self, run_id: str) -> AsyncIterator[str]:
        """Chunks of the run's log from its beginning; may end before the run does (follow reconnects)."""

    def last_lines(self, run_id: str, lines: int) -> str:
        """The last ``lines`` lines of the run's log (``logs --tail``); by default cut from ``logs``."""
        return last_lines(self.logs(run_id), lines)

    def delete(self, run_id: str) -> None:
        """Delete an ended run: its record, log and metadata on the backend (never its storage). BadInput
        when the run is unknown or has not ended yet."""
        info = self._current(run_id)
        if not info.status.terminal:
            raise BadInput(f"run {run_id!r} is {info.status.value}: stop it first: rtjob stop {run_id}")
        self._delete_ended(run_id)

    def _delete_ended(self, run_id: str) -> None:
        """Delete a run that has ended (``delete`` checked)."""
        raise NotSupported(f"delete: backend {self.name!r} cannot delete runs")

    def stuck(self, run_id: str) -> Stuck | None:
        """What the running run waits for that the cluster cannot give it now, or None (also: the backend cannot
        tell). Followers poll it: a script asking for more than the cluster has ends, not waits for ever."""
        del run_id
        return None

    # -- what rtjob adds -----------------------------------------------------------------------------
    def attempts(self, run_id: str) -> Attempts | None:
        """Every attempt of the run when rtjob retries runs on this backend; None when it does not (the
        platform retries runs itself, or not at all)."""
        del run_id
        return None

    def train_storage(self, run_id: str, log_text: str | None = None) -> builtins.list[str]:
        """Where the run's script stored its own training runs (an unchanged Ray Train script's
        ``storage_path/name``), as URIs, while the backend still knows the run; ``log_text``: its driver log, when
        the caller has it already. Empty: none, or the backend cannot tell."""
        del run_id, log_text
        return []

    def retry(self, run_id: str, request: Request | None) -> Retry | None:
        """After ``run_id`` FAILED: decide whether it is retried and, if so, submit (or attach to) the retry.
        ``request`` is this process's own request, if it submitted the run. None: rtjob does not retry
        runs on this backend."""
        del run_id, request
        return None

    def store_kept(self, run_id: str) -> builtins.list[RunInfo]:
        """Start, on each node that drove an attempt of ``run_id``, the job that stores what that node kept when
        storage failed at the run's end (`rtjob sync` for a cluster whose nodes are not this machine); the jobs as
        started. NotSupported: the backend cannot place a job on a given node."""
        raise NotSupported(f"backend {self.name!r} cannot run rtjob sync on the node that keeps run {run_id}'s "
                           "outputs: run `rtjob sync` on that node")

    # -- a supervisor on the cluster (carries a run's retries while no client follows) ---------------------------
    def supervise(self, run_id: str) -> RunInfo | None:
        """Start (or attach to) the supervisor of the run ``run_id`` where the run has something for one to carry
        (retries); None: none needed, or the backend has none."""
        del run_id
        return None

    def supervisor_of(self, run_id: str) -> RunInfo | None:
        """The run's supervisor as the backend knows it now; None: it has none."""
        del run_id
        return None

    @classmethod
    def cluster_jobs(cls) -> ClusterJobs:
        """The cluster's jobs as the supervisor's loop sees them from inside the cluster (its process:
        rtjob.runside.supervisor, run for the backend its runs declare as ``supervisor_backend``)."""
        raise NotSupported(f"backend {cls.name!r} has no supervisor on the cluster")

    def supervise_pipeline(self, pipeline_id: str, storage_uri: str | None, job: str,
                           requests: builtins.list[Request],
                           queued: dict[str, dict[str, Any]] | None = None) -> RunInfo | None:
        """Upload every step's packages (``queued``: {id: body} of steps uploaded already, queue/steps.py) and start
        (or attach to) the supervisor that runs the steps ``requests`` in order; None: the backend has none."""
        del pipeline_id, storage_uri, job, requests, queued
        return None

    def check_pipeline(self, requests: builtins.list[Request], where: str) -> None:
        """BadInput (one line) when the planned steps ``requests`` cannot run as one pipeline on this backend."""
        del requests, where

    def pipeline_supervisor_preview(self, pipeline_id: str, storage_uri: str | None, job: str,
                                    requests: builtins.list[Request]) -> dict[str, Any] | None:
        """What ``supervise_pipeline`` sends, as render shows it (masked, local packages); None: it has none."""
        del pipeline_id, storage_uri, job, requests
        return None

    def pipeline_file(self, pipeline_id: str, storage_uri: str | None, job: str,
                      requests: builtins.list[Request]) -> str:
        """What ``supervise_pipeline`` sends, as a file the platform's own CLI accepts (masked), where the pipeline
        is one job of the platform's (``pipeline_steps_inside``)."""
        del pipeline_id, storage_uri, job, requests
        raise NotSupported(f"--output yaml: backend {self.name!r} runs a pipeline as no single job file")

    # -- optional capabilities with commands of their own (backends/capabilities.py; registry.offering) --------
    def schedules(self) -> Schedules | None:
        """Runs of a job on a cron expression, kept by the platform (`rtjob schedule ...`); None: none."""
        return None

    def compute_configs(self) -> ComputeConfigs | None:
        """Compute configs registered with the platform by name (`rtjob compute-config ...`); None: none."""
        return None

    def local_cluster(self) -> LocalCluster | None:
        """The cluster on this machine that the backend starts on demand (`rtjob local ...`); None: none."""
        return None

    def job_queues(self) -> JobQueues | None:  # the platform's own job queues (`rtjob queue` there); None: none
        return None

    def hourly_cost(self, info: RunInfo) -> HourlyCost | None:
        """The rate of the cluster the run ran on, as recorded with the run at submit (None: unknown or
        free)."""
        if not info.rate:
            return None
        from ..jobspec.pricing import HourlyCost

        try:
            return HourlyCost.from_json(info.rate)
        except (KeyError, TypeError, ValueError):
            return None
