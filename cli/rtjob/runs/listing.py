"""The listings: `rtjob list` filters, applied on this side over what a backend lists (every backend lists the
same way), and the `rtjob runs`/`rtjob show` queries over the ledger and a team's storage."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import RtjobError
from ..core.model import RunInfo, RunStatus
from .archive import observe, refresh
from .memory import ledger
from .places import writable_here

if TYPE_CHECKING:
    from ..core.record import RunRecord
    from ..jobspec.project import Settings
    from ..ledger import Ledger
    from .events import RunEvents


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


# -- `rtjob runs` and `rtjob show` ----------------------------------------------------------------------------


def _listing(wanted: RunFilter, backend_name: str | None, settings: Settings,
             events: RunEvents) -> tuple[Ledger, dict[str, Any]]:
    """The ledger and `rtjob runs`' filters, once the current backend's runs whose end rtjob has not seen yet
    (after `submit --no-wait`) were asked about, so an ended run shows ended and archived."""
    from ..backends import get_backend

    book = ledger()
    backend = get_backend(settings)
    if backend_name in (None, backend.name):
        pending = book.unarchived(backend.name)
        if pending:
            refresh(backend, pending, events)
    return book, {"job": wanted.job, "status": wanted.status.value if wanted.status else None,
                  "backend": backend_name, "since": wanted.since, "limit": wanted.limit}


def _warnings(book: Ledger, events: RunEvents) -> None:
    for line in book.warnings:
        events.warning(line)
    book.warnings.clear()


def recorded_runs(wanted: RunFilter, backend_name: str | None, settings: Settings,
                  events: RunEvents) -> list[RunRecord]:
    """The ledger's runs, newest first (`rtjob runs`)."""
    book, filters = _listing(wanted, backend_name, settings, events)
    found = book.query(**filters)
    _warnings(book, events)
    return found


def recorded_summaries(wanted: RunFilter, backend_name: str | None, settings: Settings,
                       events: RunEvents) -> list[dict[str, Any]]:
    """The same runs' short form (`rtjob runs -o json`), read without the whole records."""
    book, filters = _listing(wanted, backend_name, settings, events)
    found = book.summaries(**filters)
    _warnings(book, events)
    return found


REMEMBER_AT_MOST = 200  # runs listed from an index whose full records are read to remember them in this ledger


def from_storage(root: str, endpoint: str | None, wanted: RunFilter, *, user: str | None = None,
                 backend: str | None = None, reindex: bool = False) -> tuple[list[RunRecord], list[str]]:
    """A team's runs, newest first, as ``wanted`` (and ``user``, ``backend``) keep them: from the run index beside
    the records (storage/index.py; ``reindex``: rebuilt from the records first), else, for a root with no index
    yet, by the records themselves. Runs this ledger does not know are remembered in it (their full records: all
    of them when listed from the records, the first REMEMBER_AT_MOST when listed from the index), so `status`,
    `logs`, `show`, `results`, `pull` and `rerun` find them from now on."""
    from ..storage.index import Query, list_indexed, rebuild, record_of

    problems: list[str] = []
    if reindex:
        runs, problems, _key = rebuild(root, endpoint)
    query = Query(job=wanted.job, status=wanted.status.value if wanted.status else None, user=user, backend=backend,
                  since=wanted.since, limit=wanted.limit)
    indexed = list_indexed(root, endpoint, query)
    if indexed is None:
        return _by_records(root, endpoint, query, problems)
    records = [record_of(row) for row in indexed.rows]
    _remember_full(records[:REMEMBER_AT_MOST], endpoint, indexed.problems)
    return records, problems + indexed.problems


def _by_records(root: str, endpoint: str | None, query: Any, problems: list[str]) -> tuple[list[RunRecord], list[str]]:
    """A root without an index (runs of an older rtjob only): every record read, each remembered here."""
    from ..storage.index import entry_of
    from ..storage.records import list_records

    listed = list_records(root, endpoint, job=query.job)
    try:
        book = ledger()
        for record in listed.records:
            if book.get(record.id) is None:
                book.save(record)
    except RtjobError as exc:
        listed.problems.append(f"run ledger not updated: {exc.message}")
    kept = [record for record in listed.records if query.keeps(entry_of(record))]
    return kept[:query.limit], problems + listed.problems


def _remember_full(records: list[RunRecord], endpoint: str | None, problems: list[str]) -> None:
    """The full records of listed runs this ledger does not know, read from their folders and remembered."""
    from concurrent.futures import ThreadPoolExecutor

    from ..storage.records import read_record

    try:
        book = ledger()
        unknown = [r for r in records if r.storage_uri and book.get(r.id) is None]
    except RtjobError as exc:
        problems.append(f"run ledger not updated: {exc.message}")
        return

    def full(record: RunRecord) -> RunRecord | None:
        try:
            return read_record(record.storage_uri or "", endpoint)
        except RtjobError:
            return None  # listed from the index all the same; `rtjob show ID --storage ROOT` reads it later

    with ThreadPoolExecutor(16, thread_name_prefix="rtjob-remember") as pool:
        found = list(pool.map(full, unknown))
    try:
        for record in found:
            if record is not None:
                book.save(record)
    except RtjobError as exc:
        problems.append(f"run ledger not updated: {exc.message}")


def prune(older_than_s: float) -> int:
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=older_than_s)
    return ledger().prune(older_than=cutoff)


def refreshed(settings: Settings, record: RunRecord, events: RunEvents) -> RunRecord:
    """`rtjob show`: a run whose end rtjob has not seen, as its backend reports it now (if it can be asked)."""
    if record.archived:
        return record
    from ..backends import get_backend
    from ..core.record import RUN_SIDE
    from .memory import save, with_run_side

    try:
        backend = get_backend(settings)
        if backend.name == record.backend:
            record = observe(backend, backend.status(record.id), events) or record
    except RtjobError:
        pass
    merged = with_run_side(record)  # its companion may have written its end where the cluster is gone
    if merged.completed_by in RUN_SIDE and not record.archived:
        save(merged, events, to_storage=False)
    return merged


def checkpoints_of(record: RunRecord, events: RunEvents) -> list[dict[str, Any]] | None:
    """The checkpoints in the run's storage (None: its storage cannot be read from here)."""
    if not record.storage_uri or not writable_here(record.backend, record.storage_uri):
        return None
    from ..storage.records import checkpoints

    try:
        return checkpoints(record.storage_uri, record.storage_endpoint)
    except RtjobError as exc:
        events.warning(f"checkpoints not listed: {exc.message}")
        return None
