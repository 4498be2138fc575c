"""Which runs: the one filter model behind `rtjob list`, `rtjob runs` (the ledger, or a team's storage through its
index) and `rtjob ui`'s runs page. Parsed from the commands' flags or the page's query string, it keeps a row by one
rule (``keeps``); the index applies it as it reads (storage/index.py), the ledger is asked its SQL-able part
(``ledger_query``).

Here, in storage/'s layer, because every user may import it (runs/, ui/, commands/); the duration parser
(jobspec/overrides.parse_duration, capped) is imported inside the parsers: the index, which the run side loads,
never parses flags."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import clock
from ..core.errors import BadInput
from ..core.model import RunInfo, RunStatus

# What a search (the runs page's ``q``) looks in, besides a run's tags as "key=value".
SEARCHED = ("id", "job", "user", "message", "pipeline", "description")


@dataclass(frozen=True)
class RunFilter:
    """Runs of ``job`` in ``status`` by ``user`` on ``backend``, started (else submitted) at or after ``since`` (a
    run with neither time is kept: it has not started yet), whose id, job, user, message or tags hold ``text``
    (case-insensitive); at most ``limit`` of them (None: all)."""

    job: str | None = None
    status: RunStatus | None = None
    user: str | None = None
    backend: str | None = None
    since: dt.datetime | None = None
    text: str | None = None
    limit: int | None = None

    # -- parsed from what people type ---------------------------------------------------------------------------

    @classmethod
    def from_flags(cls, *, status: str | None = None, job: str | None = None, since: str | None = None,
                   limit: int | None = 50, user: str | None = None, backend: str | None = None,
                   now: dt.datetime | None = None) -> RunFilter:
        """From a command's flags (--status, --job, --since, --limit, --user, --backend); a bad --since is one line
        of bad input (exit 2)."""
        return cls(job=job, status=_status(status, "--status"), user=user, backend=backend,
                   since=_since(since, "--since", now), limit=limit)

    @classmethod
    def from_params(cls, params: Mapping[str, str], now: dt.datetime | None = None) -> RunFilter:
        """From the runs page's query string (job, status, user, backend, since, q; blank: not asked); a bad value
        is BadInput (the page's 400)."""
        def text(name: str) -> str | None:
            value = (params.get(name) or "").strip()
            return value or None

        return cls(job=text("job"), status=_status(text("status"), "status"), user=text("user"),
                   backend=text("backend"), since=_since(text("since"), "since", now), text=text("q"))

    # -- the one matching rule ----------------------------------------------------------------------------------

    def keeps(self, row: Mapping[str, Any]) -> bool:
        """Whether a run, as a row (an index row, a record's summary, a runs-table row), passes."""
        for name, wanted in (("job", self.job), ("user", self.user), ("backend", self.backend)):
            if wanted is not None and row.get(name) != wanted:
                return False
        if self.status is not None and row.get("status") != self.status.value:
            return False
        if self.since is not None:
            when = started(row)
            if when is not None and when < self.since:
                return False
        return self.text is None or matches(row, self.text)

    def keeps_info(self, info: RunInfo) -> bool:
        """``keeps`` for a backend's RunInfo (`rtjob list`)."""
        return self.keeps({"id": info.id, "job": info.job, "backend": info.backend, "status": info.status.value,
                           "message": info.message, "start_time": info.start_time})

    def apply(self, runs: Iterable[RunInfo]) -> list[RunInfo]:
        """The runs kept, in the order given (newest first), at most ``limit``."""
        kept = [run for run in runs if self.keeps_info(run)]
        return kept if self.limit is None else kept[:self.limit]

    # -- turned into what a store is asked ----------------------------------------------------------------------

    def ledger_query(self) -> dict[str, Any]:
        """The ledger's filters (its SQL): job, status, backend, since. ``user`` and ``text`` are not columns of
        it: where ``needs_rows``, the caller applies ``keeps`` to the rows it read."""
        return {"job": self.job, "status": self.status.value if self.status else None, "backend": self.backend,
                "since": self.since}

    @property
    def needs_rows(self) -> bool:
        return self.user is not None or self.text is not None


def started(row: Mapping[str, Any]) -> dt.datetime | None:
    """A row's start (else submit) time, aware (None: neither, or not a time)."""
    text = row.get("start_time") or row.get("submitted_at")
    if not text:
        return None
    try:
        return clock.parse(str(text))
    except ValueError:
        return None


def matches(row: Mapping[str, Any], text: str) -> bool:
    """A case-insensitive search over a row's id, job, user, message, pipeline, description and tags."""
    needle = text.lower()
    if any(needle in str(row.get(name) or "").lower() for name in SEARCHED):
        return True
    tags = row.get("tags")
    return isinstance(tags, dict) and any(needle in f"{k}={v}".lower() for k, v in tags.items())


def _status(text: str | None, name: str) -> RunStatus | None:
    if text is None:
        return None
    try:
        return RunStatus(text.upper())
    except ValueError:
        raise BadInput(f"{name} {text.upper()!r}: expected one of {', '.join(s.value for s in RunStatus)}") from None


def _since(text: str | None, name: str, now: dt.datetime | None) -> dt.datetime | None:
    if text is None:
        return None
    from ..jobspec.overrides import parse_duration

    return (now or clock.now()) - dt.timedelta(seconds=parse_duration(text, name))
