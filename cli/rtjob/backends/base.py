"""The contract every backend keeps (compare TorchX's Scheduler: dryrun → request → schedule ...)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # resolve pulls in pydantic and the job schema: not needed to print a status
    from ..resolve import ResolvedJob


class RunStatus(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED)


def iso_time(ms: float | int | None) -> str | None:
    if not ms:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class RunInfo:
    """What every backend reports about one run (the JSON contract of status/list/wait/stop/submit)."""

    id: str
    job: str | None
    backend: str
    status: RunStatus
    message: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    storage_uri: str | None = None
    exit_code: int | None = None
    address: str | None = None
    entrypoint: str | None = None
    storage_endpoint: str | None = None  # the S3-compatible endpoint of storage_uri, if not AWS's (not in JSON)
    # Values to redact from anything printed about this run (never serialised).
    secrets: list[str] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job,
            "backend": self.backend,
            "status": self.status.value,
            "message": self.message,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "storage_uri": self.storage_uri,
            "exit_code": self.exit_code,
            "address": self.address,
        }


@dataclass
class SubmitResult:
    run: RunInfo
    created: bool  # False: a run with this id already existed and rtjob attached to it


class Backend(Protocol):
    name: str
    address: str

    def plan(self, job: ResolvedJob) -> Any:
        """The exact request ``submit`` will send (pure; no I/O to the cluster)."""

    def render(self, request: Any) -> dict[str, Any]:
        """The request as JSON-able data, secrets masked."""

    def equivalent_command(self, request: Any) -> str:
        """The peer CLI command that sends the same request (secrets masked)."""

    def precheck(self, job: ResolvedJob) -> list[str]:
        """Raise BadInput if the job can never fit; return warnings (e.g. needs the autoscaler)."""

    def submit(self, request: Any) -> SubmitResult: ...

    def find(self, run_id: str) -> RunInfo | None: ...

    def status(self, run_id: str) -> RunInfo: ...

    def list(self) -> list[RunInfo]: ...

    def stop(self, run_id: str) -> RunInfo: ...

    def logs(self, run_id: str) -> str: ...

    def tail(self, run_id: str) -> AsyncIterator[str]:
        """Chunks of the run's log from its beginning; may end before the run does."""
