"""The run model every layer shares: a run's status and what a backend reports about it (no backend here)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from . import clock

# A run id becomes a URL path segment (/api/jobs/ID) and a storage folder (<storage>/<job>/ID).
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: str, what: str = "run id") -> str:
    """``run_id`` if it is safe as a path segment and in a URL; else one line of bad input."""
    from .errors import BadInput

    if not RUN_ID_RE.match(run_id or "") or ".." in run_id:
        raise BadInput(f"{what}: not a valid run id; use 1-128 letters, digits, '.', '_' or '-', starting with a "
                       "letter or digit (e.g. rtjob-ddp-resnet-20261123-0210-ab12)")
    return run_id


class RunStatus(str, Enum):
    QUEUED = "QUEUED"  # waiting in a team's queue (jobspec/queues.py): not sent to the cluster yet
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
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")  # as Ray has it


def stamp(when: str | None) -> str:
    """A time as every command prints it: UTC to the second with a Z ("2026-11-27T10:06:08Z"), whatever precision
    or zone it was recorded in (a naive time is UTC: rtjob records UTC); '-' for none; unreadable text as it is.
    JSON output keeps the recorded value."""
    if not when:
        return "-"
    try:
        moment = clock.parse(when)
    except ValueError:
        return when
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    # The priced shape recorded at submit (HourlyCost.to_json()), so a finished run is priced without its job
    # file; None when the run recorded none (not in JSON: status prints the run's cost instead).
    rate: dict[str, Any] | None = None
    # The first attempt's id when this is a retry's info (rtjob's own retries on Ray), and how many attempts the
    # info tells as one run (runs/view.py folds a retried run into one); neither is in JSON.
    parent: str | None = None
    attempts: int = 1
    # Whether the run's files reached its storage (the record's "outputs": core/lifecycle.outputs); None: not said.
    outputs: dict[str, Any] | None = None
    # The end's reason as the run's verdict named it (core/verdict.EndReason's value; None: no verdict judged it).
    reason: str | None = None
    # Values to redact from anything printed about this run (never serialised).
    secrets: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        from .redact import REDACTOR

        REDACTOR.add(self.secrets)  # whatever prints this run's log or message never shows them

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
            **({"outputs": self.outputs} if self.outputs is not None else {}),
        }

    @property
    def outputs_lost(self) -> bool:
        """The run ended but its outputs are not all in its storage (the node keeps them: `rtjob sync`)."""
        return self.outputs is not None and self.outputs.get("complete") is False


@dataclass
class SubmitResult:
    run: RunInfo
    created: bool  # False: a run with this id already existed and rtjob attached to it


@dataclass
class Attempt:
    """One submission of a run that rtjob retried (attempt 1 is the original)."""

    id: str
    attempt: int
    status: str
    exit_code: int | None
    retry_reason: str | None  # why this attempt was (or would be) retried; None: not retriable

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "attempt": self.attempt, "status": self.status, "exit_code": self.exit_code,
                "retry_reason": self.retry_reason}


@dataclass
class Attempts:
    """Every attempt of one run, in order, and how many retries the run allows."""

    chain: list[Attempt]
    max_retries: int | None  # None: not known (a run record keeps the attempts, not the limit)
    attempt: int  # the attempt number of the id that was asked about
    parent: str | None  # the first attempt's id, if the id asked about is a retry

    @classmethod
    def recorded(cls, items: list[dict[str, Any]]) -> Attempts:
        """The attempts a run record kept (``Attempt.to_json()`` of each, in order), as seen from the first."""
        chain = [Attempt(str(item.get("id")), n, str(item.get("status")), item.get("exit_code"),
                         item.get("retry_reason")) for n, item in enumerate(items, 1)]
        return cls(chain, None, 1, None)

    def describe(self) -> str:
        """``2 (max_retries 1): ID FAILED (why) -> ID-retry1 SUCCEEDED`` (``2: ...`` when max_retries is unknown)."""
        parts = [f"{a.id} {a.status}" + (f" ({a.retry_reason})" if a.retry_reason else "") for a in self.chain]
        limit = f" (max_retries {self.max_retries})" if self.max_retries is not None else ""
        return f"{len(self.chain)}{limit}: " + " -> ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "parent": self.parent, "attempts": [a.to_json() for a in self.chain]}

    @property
    def worth_showing(self) -> bool:
        return len(self.chain) > 1 or bool(self.max_retries)
