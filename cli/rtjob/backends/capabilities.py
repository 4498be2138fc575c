"""Optional capabilities that have commands of their own, as small objects a backend hands out
(``Backend.schedules()``, ``compute_configs()``, ``local_cluster()``, ``job_queues()``; None: the backend has none).

The commands (`rtjob schedule`, `rtjob compute-config`, `rtjob local`) ask the registry which backend offers one
(``backends.offering``) and talk to these objects only: a new backend adds such a command's backing by
implementing one of them in its own folder, and nothing outside backends/ knows its types.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.model import RunInfo
    from .request import Log, Request

Data = dict[str, Any]


class Schedules(ABC):
    """Runs of a planned job on a cron expression, kept and started by the platform."""

    @abstractmethod
    def build(self, request: Request, name: str, cron: str, timezone: str) -> Data:
        """The schedule (plain data, secrets in the clear) that runs ``request``'s job on ``cron``; it holds
        ``cron_expression`` and ``timezone``."""

    def build_pipeline(self, planned_id: str, storage_uri: str | None, job: str, requests: list[Request], name: str,
                       cron: str, timezone: str) -> Data:
        """The schedule that runs a pipeline planned under the id ``planned_id`` (each triggered run takes an id of
        its own) with the steps ``requests`` on ``cron``."""
        del planned_id, storage_uri, job, requests, name, cron, timezone
        from ..core.errors import BadInput

        raise BadInput("this platform's schedules run one job, not a pipeline")

    @abstractmethod
    def masked(self, schedule: Data) -> Data:
        """The schedule as printed: secret values masked."""

    @abstractmethod
    def check(self, schedule: Data, where: str) -> str | None:
        """Validate with the platform's own model: what checked it, or None when that model is not installed;
        BadInput if it rejects the schedule."""

    @abstractmethod
    def apply(self, schedule: Data) -> str:
        """Create or update the schedule of this name; its id."""

    @abstractmethod
    def list(self) -> list[Data]:
        """Every schedule: {id, name, state, cron, timezone, job}, by name."""

    @abstractmethod
    def set_state(self, name: str, enabled: bool) -> str:
        """Pause (``enabled=False``) or resume schedule ``name``; its id."""

    @abstractmethod
    def trigger(self, name: str) -> str:
        """Start a run of schedule ``name`` now; its id."""

    @abstractmethod
    def delete(self, name: str) -> str:
        """Delete schedule ``name`` (runs it started are kept); its id."""


class ComputeConfigs(ABC):
    """Compute configs registered with the platform by name (a job names one as ``prefix`` NAME[:VERSION])."""

    prefix: str  # e.g. "anyscale:" (the backend's Placement holds the same)

    @abstractmethod
    def registered(self, name: str) -> Data:
        """Registered compute config ``name`` (NAME[:VERSION], no prefix) as the platform holds it."""

    @abstractmethod
    def register(self, config: Data, name: str) -> str:
        """Register ``config`` as ``name`` (a new version if the name exists); the full name (NAME:VERSION)."""

    @abstractmethod
    def check(self, config: Data, where: str) -> str | None:
        """Validate with the platform's own model: what checked it, or None when that model is not installed;
        BadInput if it rejects the config."""

    @abstractmethod
    def with_defaults(self, config: Data) -> Data:
        """A project's compute config as the platform would get it (e.g. the settings' cloud when it names none)."""


class LocalCluster(ABC):
    """A cluster on this machine that the backend starts on demand."""

    @abstractmethod
    def up(self, nodes: int, cpus_per_node: int, log: Log, gpus_per_node: int = 0) -> Data:
        """Start it (or grow it to ``nodes``), each node with its own ``gpus_per_node`` of this machine's GPUs; it
        as ``describe`` shows it."""

    @abstractmethod
    def running(self) -> bool:
        """Whether its state says it runs (a damaged state: False; ``down`` reports the damage)."""

    @abstractmethod
    def down(self, log: Log) -> int:
        """Stop only the processes rtjob started; how many were ended."""

    @abstractmethod
    def describe(self) -> Data | None:
        """{address, nodes, cpus, temp_dir}; None if none is recorded (not running: an answer, not an error);
        Unreachable (exit 3) if its state is damaged or names a cluster that does not answer."""

    @abstractmethod
    def dashboard(self) -> str | None:
        """The address its state records while it runs (nothing is contacted), else None: an address equal to it
        means this cluster (``backends.configured``)."""

    @abstractmethod
    def env(self) -> dict[str, str]:
        """The environment that points Ray's own CLI at it (`ray job list`, `ray status`); Unreachable if it is
        not running."""


@dataclass(frozen=True)
class QueuedRun:
    """A run in a platform's job queue as the platform lists it, whoever sent it."""

    info: RunInfo  # as the backend reports it now
    user: str | None  # who sent it, as the platform names them
    priority: int | None  # in rtjob's order (higher first), mapped back from the platform's
    since: str | None  # when it was sent (ISO 8601)


class JobQueues(ABC):
    """A platform's own job queues (Anyscale's: its control plane orders and admits them; rtjob runs no keeper)."""

    @abstractmethod
    def runs(self, queue: str) -> list[QueuedRun]:
        """The runs not ended that rtjob sent to ``queue`` (its queue's name, which the runs are tagged with), any
        user's, oldest first."""
