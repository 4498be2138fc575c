"""The listings: `rtjob runs`/`rtjob show` over the ledger and a team's storage, filtered by the one run filter
(storage/run_filter.py: `rtjob list` applies it to what a backend lists, the UI's runs page parses it too)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from ...core import clock
from ...core.errors import RtjobError, one_line
from ...storage.run_filter import RunFilter
from ..memory import ledger
from ..places import writable_here

if TYPE_CHECKING:
    from ...core.record import RunRecord
    from ...jobspec.project import Settings
    from ...ledger import Ledger
    from ...storage.objects import Objects
    from ..events import RunEvents


# -- `rtjob runs` and `rtjob show` ----------------------------------------------------------------------------


def _listing(wanted: RunFilter, settings: Settings, events: RunEvents) -> tuple[Ledger, dict[str, Any]]:
    """The ledger and what it is asked (``wanted``'s ledger query and limit), once the current backend's runs whose
    end rtjob has not seen yet (after `submit --no-wait`) were asked about, so an ended run shows ended and
    archived."""
    from ...backends import get_backend

    book = ledger()
    backend = get_backend(settings)
    if wanted.backend in (None, backend.name):
        pending = book.unarchived(backend.name)
        if pending:
            from ..view import refresh

            refresh(backend, pending, events)
    return book, {**wanted.ledger_query(), "limit": wanted.limit}


def _warnings(book: Ledger, events: RunEvents) -> None:
    for line in book.warnings:
        events.warning(line)
    book.warnings.clear()


def recorded_runs(wanted: RunFilter, settings: Settings, events: RunEvents) -> list[RunRecord]:
    """The ledger's runs, newest first (`rtjob runs`)."""
    book, filters = _listing(wanted, settings, events)
    found = book.query(**filters)
    _warnings(book, events)
    return found


def recorded_summaries(wanted: RunFilter, settings: Settings, events: RunEvents) -> list[dict[str, Any]]:
    """The same runs' short form (`rtjob runs -o json`), read without the whole records."""
    book, filters = _listing(wanted, settings, events)
    found = book.summaries(**filters)
    _warnings(book, events)
    return found


REMEMBER_AT_MOST = 200  # runs listed from an index whose full records are read to remember them in this ledger


def storage_rows(root: str, endpoint: str | None, wanted: RunFilter, *, reindex: bool = False,
                 compact: bool = True) -> tuple[list[Any], list[str]]:
    """A team's runs, newest first, as ``wanted`` keeps them: from the run index beside the records
    (storage/index.py; ``reindex``: rebuilt from the records first) as rows (storage.index.record_of makes each a
    record, index.record_summary its JSON: a listing of 100,000 runs makes no 100,000 records to print their
    summaries), else, for a root with no index yet, by the records themselves. Runs this ledger does not know are
    remembered in it (their full records: all of them when listed from the records, the first REMEMBER_AT_MOST when
    listed from the index), so `status`, `logs`, `show`, `results`, `pull` and `rerun` find them from now on.
    ``compact`` False: the listing never writes to the storage (`rtjob ui` is read-only), however many index
    entries are left over."""
    from ...storage.index import COMPACT_AFTER, index_objects, list_indexed, rebuild

    problems: list[str] = []
    if reindex:
        runs, problems, _key = rebuild(root, endpoint)
    objects = index_objects(root, endpoint, light=True)
    try:
        indexed = list_indexed(root, endpoint, wanted, objects=objects,
                               compact_after=COMPACT_AFTER if compact else 1 << 62)
        if indexed is None:
            records, found = _by_records(root, endpoint, wanted, problems)
            return list(records), found
        _remember_full(indexed.rows[:REMEMBER_AT_MOST], root, objects, endpoint, indexed.problems)
    finally:
        objects.close()
    return indexed.rows, problems + indexed.problems


def _by_records(root: str, endpoint: str | None, query: RunFilter,
                problems: list[str]) -> tuple[list[RunRecord], list[str]]:
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
        listed.problems.append(f"run ledger not updated: {one_line(exc)}")
    kept = [record for record in listed.records if query.keeps(entry_of(record))]
    return kept[:query.limit] if query.limit is not None else kept, problems + listed.problems


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
        problems.append(f"run ledger not updated: {one_line(exc)}")
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
        problems.append(f"run ledger not updated: {one_line(exc)}")


def prune(older_than_s: float) -> int:
    cutoff = clock.now() - dt.timedelta(seconds=older_than_s)
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
    merged = with_run_side(record, strict=True)  # its companion may have written its end where the cluster is gone
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
