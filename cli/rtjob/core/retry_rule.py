"""The one retry rule of a run: an attempt's end → why it is retried (or None), and whether retries are left.

Every actor that may retry a run asks here: the run's companion (its attempt's verdict, runside/outcome.py), a
client that follows (``submit``, ``wait``: backends/ray/retries.py) and the supervisor (runside/supervisor/loop.py).
Each translates what it saw (the child's exit, the Jobs API's dict) into an ``AttemptEnd``; the rule itself is
written once. Retried: a *lost driver* (its node or supervisor was lost, or the entrypoint was killed by SIGKILL or
SIGTERM: the OOM killer, a node shutdown, a preemption). Never retried: any other end, a stop, the job's own time
limit. Stdlib and rtjob_contract only: the cluster imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import rtjob_contract as contract

FAILED = "FAILED"
# Exit codes of an entrypoint killed by a signal: -N from the child itself, 128 + N through the shell.
KILLED_BY = {-9: "SIGKILL", 137: "SIGKILL", -15: "SIGTERM", 143: "SIGTERM"}


@dataclass(frozen=True)
class AttemptEnd:
    """How one attempt ended, as any actor saw it."""

    status: str  # RunStatus value
    exit_code: int | None = None
    timed_out: bool = False  # ended at the job's own time limit (timeout_s): a retry would time out again
    stop_requested: bool = False  # `rtjob stop` asked first: a stop, not a lost driver
    lost_driver: str | None = None  # what the platform said when it lost the driver's node or supervisor


def killed_by(code: int | None) -> str | None:
    """The signal's name when ``code`` is a kill by SIGKILL or SIGTERM; else None."""
    return None if code is None else KILLED_BY.get(code)


def retry_reason(end: AttemptEnd) -> str | None:
    """Why this attempt is retried (one line), or None when it is not."""
    if end.status != FAILED or end.timed_out or end.stop_requested:
        return None
    if end.lost_driver is not None:
        return f"its driver was lost ({end.lost_driver})"
    name = killed_by(end.exit_code)
    return None if name is None else f"its driver was killed by {name} (exit code {end.exit_code})"


def retries_left(attempt: int, max_retries: int) -> bool:
    """Whether attempt number ``attempt`` (1: the first) may be followed by another under ``max_retries``."""
    return attempt <= max_retries


def attempt_number(metadata: Mapping[str, Any]) -> int:
    """The attempt number rtjob's metadata of a job gives (1: the first, or none said)."""
    try:
        return int(metadata.get(contract.META_ATTEMPT) or 1)
    except (TypeError, ValueError):
        return 1


def max_retries(metadata: Mapping[str, Any]) -> int:
    """The job's max_retries as rtjob's metadata of it gives (0: none said)."""
    try:
        return int(metadata.get(contract.META_MAX_RETRIES) or 0)
    except (TypeError, ValueError):
        return 0
