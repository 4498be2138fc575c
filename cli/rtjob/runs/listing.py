"""`rtjob list` filters, applied on this side over what a backend lists (every backend lists the same way)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ..core.model import RunInfo, RunStatus


@dataclass(frozen=True)
class RunFilter:
    status: RunStatus | None = None
    job: str | None = None
    since: dt.datetime | None = None  # runs started at or after this time (a run not started yet is kept)
    limit: int = 50

    @classmethod
    def parse(cls, status: str | None, job: str | None, since: str | None, limit: int,
              now: dt.datetime | None = None) -> RunFilter:
        """From the flags' text; a bad --since is one line of bad input (exit 2)."""
        from ..jobspec.overrides import parse_duration

        start = None
        if since is not None:
            start = (now or dt.datetime.now(dt.timezone.utc)) - dt.timedelta(seconds=parse_duration(since, "--since"))
        return cls(RunStatus(status.upper()) if status else None, job, start, limit)

    def keeps(self, run: RunInfo) -> bool:
        if self.status is not None and run.status != self.status:
            return False
        if self.job is not None and run.job != self.job:
            return False
        if self.since is not None and run.start_time:
            return dt.datetime.fromisoformat(run.start_time) >= self.since
        return True

    def apply(self, runs: list[RunInfo]) -> list[RunInfo]:
        """The runs kept, in the backend's order (newest first), at most ``limit``."""
        return [run for run in runs if self.keeps(run)][: self.limit]
