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
    from ...backends.base import Backend
    from ...core.queueing import Place
    from ...core.record import RunRecord
    from ...jobspec.project import Settings
    from ...jobspec.queues import QueueSettings
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
            from ..view import ask_backend_about

            ask_backend_about(backend, pending, events)
    _cache_run_side(book)
    return book, {**wanted.ledger_query(), "limit": wanted.limit}


def _cache_run_side(book: Ledger) -> None:
    """This ledger's rows of runs not ended refreshed from their records in storage (what their run side wrote
    since: an end, a beat), so `rtjob runs` says what `status` says. The ledger is a cache: nothing else written. A
    storage that cannot be read is asked no more (the rows stay as they are)."""
    from ...core.errors import StorageError
    from ..events import Quiet
    from ..memory import keep, with_run_side

    try:
        going = [record for record in book.unarchived() if not record.run_status.terminal][:BEATS_AT_MOST]
    except RtjobError:
        return
    for record in going:
        try:
            merged = with_run_side(record, strict=True)
        except StorageError:
            return
        except RtjobError:
            continue
        if merged.dumps() != record.dumps():
            keep(merged, Quiet())


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
    """The same runs' short form (`rtjob runs -o json`) with each one's verdict, read without the whole records."""
    from ...core.index_entry import summary_said

    book, filters = _listing(wanted, settings, events)
    found = [summary_said(row) for row in book.summaries(**filters)]
    _warnings(book, events)
    return found


REMEMBER_AT_MOST = 200  # runs listed from an index whose full records are read to remember them in this ledger


def storage_rows(root: str, endpoint: str | None, wanted: RunFilter, *, reindex: bool = False,
                 compact: bool = False) -> tuple[list[Any], list[str]]:
    """A team's runs, newest first, as ``wanted`` keeps them: from the run index beside the records
    (storage/index.py; ``reindex``: rebuilt from the records first) as rows (storage.index.record_of makes each a
    record, index.record_summary its JSON: a listing of 100,000 runs makes no 100,000 records to print their
    summaries), else, for a root with no index yet, by the records themselves. Runs this ledger does not know are
    remembered in it (their full records: all of them when listed from the records, the first REMEMBER_AT_MOST when
    listed from the index), so `status`, `logs`, `show`, `results`, `pull` and `rerun` find them from now on.
    Each row says its run's verdict (core/verdict.py; a run not ended: from its record's latest beat, so a run
    whose companion stopped beating reads as `status` reads it). A read never writes to the storage: the index is
    compacted by its writers (the client's end write) or by ``reindex``; ``compact`` is for those."""
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
        beats = _remember_full(indexed.rows[:REMEMBER_AT_MOST], root, objects, endpoint, indexed.problems)
        beats.update(_beats([r for r in indexed.rows if r.get("id") not in beats], root, objects, endpoint))
    finally:
        objects.close()
    from ..queued import places_of  # a queued run's position: each queue listed read once

    places = places_of(indexed.rows) if any(row.get("status") == "QUEUED" for row in indexed.rows) else {}
    return ([_seen(row, beats.get(str(row.get("id"))), places.get(str(row.get("id")))) for row in indexed.rows],
            problems + indexed.problems)


_ENDS = ("SUCCEEDED", "FAILED", "STOPPED")
BEATS_AT_MOST = 100  # runs not ended whose records a listing reads for their latest beat


def _seen(row: dict[str, Any], record: RunRecord | None, place: Place | None = None) -> dict[str, Any]:
    """The row as its run's verdict says it: from its record's latest beat where that was read; a queued run at its
    ``place`` in its queue."""
    from ...core.index_entry import entry_of, seen_row

    if record is None or row.get("status") in _ENDS:
        return seen_row(row, place=place)  # an end listed is the end its writer wrote
    return seen_row({**row, **entry_of(record)}, place=place)


def _beats(rows: list[dict[str, Any]], root: str, objects: Objects, endpoint: str | None) -> dict[str, RunRecord]:
    """The records of listed runs not ended whose entry names a carrier (its beats are in its record only)."""
    going = [row for row in rows if row.get("carried_by") and row.get("storage_uri")
             and row.get("status") not in _ENDS][:BEATS_AT_MOST]
    found = _read_records(going, root, objects, endpoint)
    return {record.id: record for record in found if record is not None}


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
                   problems: list[str]) -> dict[str, RunRecord]:
    """The full records of listed runs this ledger does not know, read from their folders and remembered (one
    transaction; the ledger is this machine's cache). Returns those read, by id."""
    try:
        book = ledger()
        unknown = [row for row in rows if row.get("storage_uri") and book.get(row["id"]) is None]
    except RtjobError as exc:
        problems.append(f"run ledger not updated: {one_line(exc)}")
        return {}
    found = [record for record in _read_records(unknown, root, objects, endpoint) if record is not None]
    try:
        book.save_many(iter(found))
    except RtjobError as exc:
        problems.append(f"run ledger not updated: {one_line(exc)}")
    return {record.id: record for record in found}


def _read_records(rows: list[dict[str, Any]], root: str, objects: Objects,
                  endpoint: str | None) -> list[RunRecord | None]:
    """The listed runs' records, read from their folders (a folder below ``root`` through the listing's own
    ``objects``: no client per record); None for one that cannot be read."""
    from concurrent.futures import ThreadPoolExecutor

    from ...core.record import RunRecord
    from ...storage.records import MAX_RECORD_BYTES, RUN_RECORD_FILE, read_record

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

    if len(rows) > 1:
        with ThreadPoolExecutor(16, thread_name_prefix="rtjob-remember") as pool:
            return list(pool.map(full, rows))
    return [full(row) for row in rows]


def prune(older_than_s: float) -> int:
    cutoff = clock.now() - dt.timedelta(seconds=older_than_s)
    return ledger().prune(older_than=cutoff)


def record_as_now(settings: Settings, record: RunRecord, events: RunEvents) -> RunRecord:
    """`rtjob show`: a run whose end rtjob has not seen, as its backend reports it now (if it can be asked)."""
    if record.archived:
        return record
    from ...backends import get_backend
    from ...core.lifecycle import ended_by_run_side
    from ..memory import keep, with_run_side
    from ..view import look

    try:
        backend = get_backend(settings)
        if backend.name == record.backend and not record.steps:  # seen as one story (view.look): a retried
            look(backend, record.id, None, events)                # run's latest attempt; the ledger refreshed
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


def platform_queue_rows(backend: Backend, queue: QueueSettings, events: RunEvents) -> list[dict[str, Any]]:
    """`rtjob queue NAME` where the platform keeps the queue (Anyscale's job queues): the runs not ended that rtjob
    sent to it, any user's, as the platform lists them (backends/capabilities.JobQueues), and the ones this
    machine sent that the listing missed, each as the backend says it now; oldest first. The platform tells no
    position: each is "unknown" (None); the order and the admission are the platform's. This machine's record of
    a run says its priority, user and time where it has one."""
    from ...core.model import RunStatus
    from ...core.verdict import of_record
    from ..view import look

    target = queue.anyscale_queue or queue.name
    queues = backend.job_queues()
    listed = {run.info.id: run for run in (queues.runs(queue.name) if queues is not None else [])}
    mine = {r.id: r for r in ledger().unarchived(backend.name) if (r.queue or {}).get("name") == queue.name}
    rows = []
    for run_id in set(listed) | set(mine):
        seen, record = listed.get(run_id), mine.get(run_id)
        if record is not None:
            try:
                info = seen.info if seen is not None else look(backend, run_id, None, events).info
            except RtjobError:
                info = of_record(record).onto(record.to_run_info())
            priority, user, since = (record.queue or {}).get("priority"), record.user, record.submitted_at
        else:
            assert seen is not None
            info, priority, user, since = seen.info, seen.priority, seen.user, seen.since
        if not info.status.terminal:
            rows.append({"id": run_id, "status": "QUEUED" if info.status == RunStatus.PENDING else info.status.value,
                         "position": None, "priority": priority, "user": user, "job": info.job or (
                             record.job if record is not None else None), "waiting_since": since,
                         "reason": f"in Anyscale's job queue {target}: its order is Anyscale's (no position given)"})
    return sorted(rows, key=lambda row: row["waiting_since"] or "")
