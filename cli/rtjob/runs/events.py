"""What a run's use cases tell whoever drives them: facts, not wording a command must print. The CLI implements
it (commands/events.py) and decides how each fact reads; a process without a terminal can implement it too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..backends.base import Retry
    from ..core.model import RunInfo
    from .runner import Plan, Submitted


class RunEvents(Protocol):
    def note(self, text: str) -> None:
        """Progress worth a line: the embedded cluster starting, an upload, a lost and restored contact."""

    def warning(self, text: str) -> None:
        """Something left undone that the run survives (a record not written, a log not archived)."""

    def submitted(self, planned: Plan, done: Submitted) -> None:
        """The run was submitted (or attached to: ``done.created`` is False) and recorded."""

    def status(self, info: RunInfo) -> None:
        """A followed run's status changed and it has not ended."""

    def retrying(self, failed: str, decision: Retry) -> None:
        """Attempt ``failed`` FAILED and the backend submitted (or found) its next attempt."""

    def ended(self, info: RunInfo) -> None:
        """A followed run ended (recorded and archived by then)."""

    def detached(self, run_id: str) -> None:
        """Ctrl-C while following: the run keeps running without a follower."""


def stop_begins(run_id: str, why: str | None = None) -> str:
    """The line told where rtjob's stop of a run begins: what the run's log shows after it is Ray ending the run's
    processes (SIGTERM notices, native stack dumps), which would otherwise read like rtjob crashing."""
    return (f"{why + ': ' if why else ''}stopping {run_id} ... (Ray's shutdown output may follow in its log: "
            "'*** SIGTERM received' and stack dumps are Ray ending the run's processes)")


class Quiet:
    """Events nobody hears: a use case run for its effect alone."""

    def note(self, text: str) -> None:
        pass

    def warning(self, text: str) -> None:
        pass

    def submitted(self, planned: Plan, done: Submitted) -> None:
        pass

    def status(self, info: RunInfo) -> None:
        pass

    def retrying(self, failed: str, decision: Retry) -> None:
        pass

    def ended(self, info: RunInfo) -> None:
        pass

    def detached(self, run_id: str) -> None:
        pass
