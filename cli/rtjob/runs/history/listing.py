"""The listings: `rtjob list` filters, applied on this side over what a backend lists (every backend lists the
same way), and the `rtjob runs`/`rtjob show` queries over the ledger and a team's storage."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.errors import RtjobError
from ...core.model import RunInfo, RunStatus
from ..memory import ledger
from ..places import writable_here

if TYPE_CHECKING:
    from ...core.record import RunRecord
    from ...jobspec.project import Settings
    from ...ledger import Ledger
    from ...storage.objects import Objects
    from ..events import RunEvents


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
        from ...jobspec.overrides import parse_duration

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
    from ...backends import get_backend

    book = ledger()
    backend = get_backend(settings)
    if backend_name in (None, backend.name):
        pending = book.unarchived(backend.name)
        if pending:
            from ..view import refresh

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
    from ...storage.index import record_of

    rows, problems = storage_rows(root, endpoint, wanted, user=user, backend=backend, reindex=reindex)
    return [record_of(row) if isinstance(row, dict) else row for row in rows], problems


def storage_rows(root: str, endpoint: str | None, wanted: RunFilter, *, user: str | None = None,
                 backend: str | None = None, reindex: bool = False,
                 compact: bool = True) -> tuple[list[Any], list[str]]:
    """``from_storage``'s runs as the index holds them (rows: storage.index.record_of makes each a record,
    index.summary_of its JSON), or as records where the root has no index: a listing of 100,000 runs makes no
    100,000 records to print their summaries. ``compact`` False: the listing never writes to the storage (`rtjob
    ui` is read-only), however many index entries are left over."""
    from ...storage.index import COMPACT_AFTER, Query, index_objects, list_indexed, rebuild

    problems: list[str] = []
    if reindex:
        runs, problems, _key = rebuild(root, endpoint)
    query = Query(job=wanted.job, status=wanted.status.value if wanted.status else None, user=user, backend=backend,
                  since=wanted.since, limit=wanted.limit)
    objects = index_objects(root, endpoint, light=True)
    try:
        indexed = list_indexed(root, endpoint, query, objects=objects,
                               compact_after=COMPACT_AFTER if compact else 1 << 62)
        if indexed is None:
            records, found = _by_records(root, endpoint, query, problems)
            return list(records), found
        _remember_full(indexed.rows[:REMEMBER_AT_MOST], root, objects, endpoint, indexed.problems)
    finally:
        objects.close()
    return indexed.rows, problems + indexed.problems


def _by_records(root: str, endpoint: str | None, query: Any, problems: list[str]) -> tuple[list[RunRecord], list[str]]:
    """A root without an index (runs of an older rtjob only): every record read, each remembered here."""
    from ...storage.index import entry_of
    from ...storage.records import list_records

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


def _remember_full(rows: list[dict[str, Any]], root: str, objects: Objects, endpoint: str | None,
                   problems: list[str]) -> None:
    """The full records of listed runs this ledger does not know, read from their folders and remembered (one
    transaction). A folder below ``root`` is read through the listing's own ``objects`` (no client per record)."""
    from concurrent.futures import ThreadPoolExecutor

    from ...core.record import RunRecord
    from ...storage.records import MAX_RECORD_BYTES, RUN_RECORD_FILE, read_record

    try:
        book = ledger()
        unknown = [row for row in rows if row.get("storage_uri") and book.get(row["id"]) is None]
    except RtjobError as exc:
        problems.append(f"run ledger not updated: {exc.message}")
        return
    below = root.rstrip("/") + "/"

    def full(row: dict[str, Any]) -> RunRecord | None:
        uri: str = row["storage_uri"]
        try:
            if uri.startswith(below):
                rel = f"{uri[len(below):].strip('/')}/{RUN_RECORD_FILE}"
                got = objects.get(rel, MAX_RECORD_BYTES)
                return None if got is None else RunRecord.loads(got.data, f"{uri}/{RUN_RECORD_FILE}")
            return read_record(uri, endpoint)
        except RtjobError:
            return None  # listed from the index all the same; `rtjob show ID --storage ROOT` reads it later

    if len(unknown) > 1:
        with ThreadPoolExecutor(16, thread_name_prefix="rtjob-remember") as pool:
            found = list(pool.map(full, unknown))
    else:
        found = [full(row) for row in unknown]
    try:
        book.save_many(record for record in found if record is not None)
    except RtjobError as exc:
        problems.append(f"run ledger not updated: {exc.message}")


def prune(older_than_s: float) -> int:
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=older_than_s)
    return ledger().prune(older_than=cutoff)


def refreshed(settings: Settings, record: RunRecord, events: RunEvents) -> RunRecord:
    """`rtjob show`: a run whose end rtjob has not seen, as its backend reports it now (if it can be asked)."""
    if record.archived:
        return record
    from ...backends import get_backend
    from ...core.lifecycle import ended_by_run_side
    from ..memory import keep, with_run_side
    from ..view import look

    try:
        backend = get_backend(settings)
        if backend.name == record.backend and not record.steps:  # observed as one story (view.look): a retried
            look(backend, record.id, None, events)                # run's latest attempt; an ended one archived
            record = ledger().get(record.id) or record
    except RtjobError:
        pass
    merged = with_run_side(record)  # its companion may have written its end where the cluster is gone
    if ended_by_run_side(merged) and not record.archived:
        keep(merged, events)
    return merged


def checkpoints_of(record: RunRecord, events: RunEvents) -> list[dict[str, Any]] | None:
    """The checkpoints in the run's storage (None: its storage cannot be read from here)."""
    if not record.storage_uri or not writable_here(record.backend, record.storage_uri):
        return None
    from ...storage.records import checkpoints

    try:
        return checkpoints(record.storage_uri, record.storage_endpoint)
    except RtjobError as exc:
        events.warning(f"checkpoints not listed: {exc.message}")
        return None
