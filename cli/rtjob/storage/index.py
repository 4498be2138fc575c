"""A team's runs indexed beside their records: entries written at each record write, compacted by any client into
immutable index objects, read in a few requests (the layout: rtjob_contract's INDEX_* names).

The records stay the truth (``--reindex`` rebuilds the index from them); the index is a last-writer-wins map, run
id → the run's listed fields, folded from immutable pieces:

- an **entry** (``rtjob-index/entries/<stamp>-<run id>-<nonce>.json``) is written by whoever writes the record (the
  submitting client, the run-side companion at the run's end, a client that completes a run it saw end); for one run
  the entry with the greatest name (its stamp first) is its latest state;
- an **index object** (``rtjob-index/index/<seq>-<writer>.jsonl``) is a fold of the newest index object(s) and the
  entries present when a client compacted; its header names the index objects it folded (``indexes``) and the
  entries it read (``entries``); each run's row keeps the name of the entry it came from.

Folding is a per-run maximum over entry names, so it can be repeated and reordered: reading an entry twice or an
index object and the entries it already holds never duplicates a run. A reader takes the newest index object,
every other index object present that it does not name as folded, and every entry present that it did not read.
Two compactors at once each write an index object of their own name (unique, created with If-None-Match), so
neither replaces the other, even where the server's conditional write is not atomic (moto's); the next reader folds
both. Nothing is deleted unless a newer object that exists (HEAD after the write) holds it: an entry once an index
object folded it, an index object once an index object of a higher sequence named it folded. A reader that finds a
listed object gone (a compactor deleted it meanwhile) reads again; a race costs a request, never a run.

Importable on the cluster: the stdlib, rtjob_contract and rtjob's storage modules at module level only (the S3
client is made inside ``index_objects``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rtjob_contract import (
    INDEX_ENTRIES_DIR,
    INDEX_OBJECTS_DIR,
    INDEX_SCHEMA,
    index_entry_name,
    index_object_name,
    index_stamp,
)

from ..core.errors import BadInput
from ..core.record import RunRecord
from .location import Location, parse_location
from .objects import Objects
from .run_filter import RunFilter, started

# The fields `rtjob runs` prints and filters on: RunRecord.summary()'s keys, and user, pipeline.
FIELDS = ("id", "job", "backend", "status", "message", "start_time", "end_time", "storage_uri", "exit_code",
          "address", "submitted_at", "updated_at", "archived", "git_commit", "git_dirty", "cost_usd", "user",
          "pipeline")
# What an entry holds besides (shared with the UI's runs table): the number of attempts so far, the run's duration
# (None until it has both ends), its tags and its job's args (as recorded at submit, secrets masked) and its final
# metrics (the last epoch row's numeric values).
DETAILS = ("attempts", "duration_s", "tags", "args", "final_metrics")
KEY = "entry"  # a row's field: the name (below entries/) of the entry it came from; absent from what is printed
COMPACT_AFTER = 200  # a reader compacts once this many entries (or a second index object) are left over
MAX_ENTRY_BYTES = 256 * 1024
MAX_INDEX_BYTES = 2 * 1024 * 1024 * 1024
READ_TRIES = 5  # a listing re-read after a compactor deleted what it had listed; then a problem line
CONCURRENCY = 16
_NONCE_HEX = 12
_PARSE_ONE_BY_ONE = 1000  # a listing of up to this many runs parses the newest index object's lines as it reaches them

Row = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Writing an entry: the call a record's writer makes (client, companion, supervisor)


def index_objects(root_uri: str, endpoint: str | None = None, concurrency: int = CONCURRENCY, *,
                  light: bool = False) -> Objects:
    """The storage root's objects (storage/opening.objects_for), shared by ``concurrency`` threads; ``light``: a
    client's listing, through the stdlib's SigV4 where it serves as boto3 would (no botocore to import)."""
    from .opening import objects_for

    return objects_for(root_uri, endpoint, concurrency, light=light)


def root_of(run_uri: str, run_id: str) -> str | None:
    """The storage root of a run folder ``<root>/<job>/<run id>`` (None: the folder is not laid out so, and the
    run is not listed from a root: no entry)."""
    location = parse_location(run_uri)
    parts = location.path.rstrip("/").split("/")
    if location.scheme == "s3":
        if len(parts) < 2 or parts[-1] != run_id:
            return None
        return Location("s3", location.bucket, "/".join(parts[:-2])).uri
    if len(parts) < 4 or parts[-1] != run_id:  # a local root below "/"
        return None
    return Location("file", "", "/".join(parts[:-2])).uri


def entry_of(record: RunRecord) -> Row:
    """The run's listed fields (RunRecord.summary() and user, pipeline) and its DETAILS."""
    document = (record.spec or {}).get("document") or {}
    last = (record.metrics or {}).get("last") or {}
    return {**record.summary(), "user": record.user, "pipeline": record.pipeline,
            "attempts": len(record.attempts) or 1,
            "duration_s": _duration_s(record.start_time or record.submitted_at, record.end_time),
            "tags": _texts(document.get("tags")), "args": dict(document.get("args") or {}) if isinstance(document.get("args"), dict) else {},
            "final_metrics": {k: v for k, v in last.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if isinstance(last, dict) else {}}


def _texts(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _duration_s(start: str | None, end: str | None) -> float | None:
    try:
        first, last = dt.datetime.fromisoformat(start or ""), dt.datetime.fromisoformat(end or "")
    except ValueError:
        return None
    if (first.tzinfo is None) != (last.tzinfo is None):
        return None
    return round(max(0.0, (last - first).total_seconds()), 3)


def write_entry(root_uri: str, endpoint: str | None, record: RunRecord, *, objects: Objects | None = None,
                now: dt.datetime | None = None) -> str:
    """One entry for ``record`` below ``root_uri`` (created if absent: a name of its own); returns its key
    relative to the root. Written at each status change of the run (core/lifecycle.write), never at a heartbeat."""
    stamp = index_stamp(now or dt.datetime.now(dt.timezone.utc))
    run_id = _plain_id(record.id)
    key = index_entry_name(stamp, run_id, os.urandom(_NONCE_HEX // 2).hex())
    data = json.dumps({"schema": INDEX_SCHEMA, **entry_of(record)}, separators=(",", ":")).encode()
    store = objects or index_objects(root_uri, endpoint, concurrency=1)
    try:
        store.put(key, data, if_absent=True)
    finally:
        if objects is None:
            store.close()
    return key


def write_run_entry(run_uri: str, endpoint: str | None, record: RunRecord) -> str | None:
    """``write_entry`` for the run whose folder is ``run_uri`` (``<root>/<job>/<run id>``): the run-side
    companion's call at a run's end, after it wrote the record. None: the folder is not below a root."""
    root = root_of(run_uri, record.id)
    return None if root is None else write_entry(root, endpoint, record)


def _plain_id(run_id: str) -> str:
    if not run_id or "/" in run_id or run_id in (".", "..") or "\x00" in run_id:
        raise BadInput(f"run id {run_id!r}: not indexable (one plain name)")
    return run_id


def _entry_parts(rel: str) -> tuple[str, str] | None:
    """An entry's (name below entries/, run id) from its key; None: not an entry's name."""
    name = rel[len(INDEX_ENTRIES_DIR) + 1:]
    stem = name[:-len(".json")] if name.endswith(".json") else ""
    stamp_len = len(index_stamp(dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)))
    if "/" in name or len(stem) < stamp_len + _NONCE_HEX + 3 or stem[stamp_len] != "-" \
            or stem[-_NONCE_HEX - 1] != "-":
        return None
    return name, stem[stamp_len + 1:-_NONCE_HEX - 1]


# ---------------------------------------------------------------------------------------------
# Reading: the newest index object, the ones it did not fold, the entries left over


@dataclass
class Snapshot:
    """What one read of the index found: ``rows`` run id → row (the fold of everything but the newest index
    object's lines, which stay unparsed until asked for), and what a compactor needs."""

    present: bool = False  # any index object or entry exists (else the root has no index: list its records)
    newest: str | None = None  # the newest index object's key
    seq: int = 0
    lines: list[bytes] = field(default_factory=list)  # the newest index object's rows, newest first, unparsed
    rows: dict[str, Row] = field(default_factory=dict)  # the other index objects' rows and the entries' (folded)
    folded_indexes: list[str] = field(default_factory=list)  # every index object this read holds
    entries: list[str] = field(default_factory=list)  # entry keys present (read, or held by the newest object)
    problems: list[str] = field(default_factory=list)

    def runs(self, query: RunFilter | None = None) -> Iterator[Row]:
        """The runs newest first (by start, else submit time; undated last), each once, as ``query`` keeps (None:
        all). The newest index object's lines are parsed as they are reached (a first page reads a few of them)."""
        query = query or RunFilter()
        extra = dict(self.rows)
        skip: set[int] = set()
        if extra:  # a run both in a line and in the rest: the greater entry name wins, the other is dropped
            for at, line in enumerate(self.lines):
                run_id = _line_id(line)
                if run_id in extra:
                    row = json.loads(line)
                    if row[KEY] > extra[run_id][KEY]:
                        del extra[run_id]
                    else:
                        skip.add(at)
        kept = (line for at, line in enumerate(self.lines) if at not in skip) if skip else iter(self.lines)
        if query.limit is None or query.limit > _PARSE_ONE_BY_ONE:  # most of them: parsed in one call
            newest: Iterator[Row] = iter(json.loads(b"[" + b",".join(kept) + b"]"))
        else:
            newest = (json.loads(line) for line in kept)
        count = 0
        for row in _merged(newest, sorted(extra.values(), key=_newest_first)):
            if query.keeps(row):
                yield row
                count += 1
                if query.limit is not None and count >= query.limit:
                    return

    def leftover(self) -> int:
        """How many objects a compaction would fold beyond the newest index object."""
        return len(self.folded_indexes) - (1 if self.newest else 0) + len(self.entries)


def _merged(newest: Iterator[Row], extra: list[Row]) -> Iterator[Row]:
    """heapq.merge(newest, extra, key=_newest_first) (a tie: newest's first), the rest of ``newest`` as it is once
    ``extra`` (a few entries) is used up: its rows' times are not parsed."""
    keys = [_newest_first(row) for row in extra]
    at = 0
    for row in newest:
        if at < len(extra):
            key = _newest_first(row)
            while at < len(extra) and keys[at] < key:
                yield extra[at]
                at += 1
        yield row
        if at == len(extra):
            break
    yield from newest
    yield from extra[at:]


def _line_id(line: bytes) -> str:
    """A row's run id without parsing the line (rows are written with "id" first)."""
    if line.startswith(b'{"id":"'):
        end = line.find(b'"', 7)
        if end > 0 and b"\\" not in line[7:end]:
            return line[7:end].decode()
    return str(json.loads(line)["id"])


def read_index(objects: Objects) -> Snapshot:
    """The index as it is now; a listed object deleted meanwhile (a compactor's) makes it read again."""
    for _ in range(READ_TRIES):
        snapshot = _read_once(objects)
        if snapshot is not None:
            return snapshot
    snapshot = Snapshot(present=True)
    snapshot.problems.append(f"{objects.uri}: the run index changed under every one of {READ_TRIES} reads "
                             "(compactions at once); rtjob runs --reindex lists from the records")
    return snapshot


def _read_once(objects: Objects) -> Snapshot | None:
    # Entries first, index objects second: an entry deleted between the two listings is held by an index object
    # the second listing shows (it was written before the deletion).
    entry_keys = [item.rel for item in objects.list(INDEX_ENTRIES_DIR)]
    index_keys = [item.rel for item in objects.list(INDEX_OBJECTS_DIR) if _index_seq(item.rel) is not None]
    snapshot = Snapshot(present=bool(entry_keys or index_keys))
    held: set[str] = set()
    if index_keys:
        newest = max(index_keys, key=lambda key: (_index_seq(key), key))
        got = _read_index_object(objects, newest, snapshot.problems)
        if got is None:
            return None
        header, lines = got
        snapshot.newest, snapshot.seq, snapshot.lines = newest, int(header.get("seq", 0)), lines
        folded = set(header.get("indexes") or [])
        held = set(header.get("entries") or [])
        snapshot.folded_indexes = [newest]
        others = [key for key in index_keys if key != newest and key not in folded]
        for key in others:  # written beside the newest (two compactors at once): folded in too
            other = _read_index_object(objects, key, snapshot.problems)
            if other is None:
                return None
            _fold(snapshot.rows, (json.loads(line) for line in other[1]))
            snapshot.folded_indexes.append(key)
        snapshot.folded_indexes += [key for key in index_keys if key in folded]
    named = [(key, parts[0]) for key in entry_keys if (parts := _entry_parts(key)) is not None]
    wanted = [key for key, name in named if name not in held]
    raws = _each(wanted, lambda key: objects.get(key, MAX_ENTRY_BYTES), objects)
    skipped: set[str] = set()
    for key, raw in zip(wanted, raws, strict=True):
        if raw is None:
            return None  # deleted since it was listed: a newer index object holds it
        row = _entry_row(raw.data, f"{objects.uri}/{key}", key, snapshot.problems)
        if row is None:
            skipped.add(key)  # never counted as held: a compaction leaves it where it is
        else:
            _fold(snapshot.rows, [row])
    snapshot.entries = [key for key, _name in named if key not in skipped]
    return snapshot


def _read_index_object(objects: Objects, key: str, problems: list[str]) -> tuple[Row, list[bytes]] | None:
    got = objects.get(key, MAX_INDEX_BYTES)
    if got is None:
        return None
    where = f"{objects.uri}/{key}"
    lines = got.data.split(b"\n")
    try:
        header = json.loads(lines[0])
    except ValueError as exc:
        raise BadInput(f"{where}: not an rtjob run index ({exc}); rtjob runs --reindex rebuilds it") from None
    if not isinstance(header, dict) or not isinstance(header.get("schema"), int):
        raise BadInput(f"{where}: not an rtjob run index; rtjob runs --reindex rebuilds it")
    if header["schema"] > INDEX_SCHEMA:
        raise BadInput(f"{where}: a run index of schema {header['schema']}, newer than this rtjob reads "
                       f"({INDEX_SCHEMA}); upgrade rtjob")
    body = [line for line in lines[1:] if line]
    if len(body) != header.get("runs"):
        raise BadInput(f"{where}: holds {len(body)} runs, its header says {header.get('runs')}: not whole; "
                       "rtjob runs --reindex rebuilds the index")
    return header, body


def _entry_row(data: bytes, where: str, key: str, problems: list[str]) -> Row | None:
    try:
        row = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        problems.append(f"{where}: not an rtjob index entry ({exc}); skipped")
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("schema"), int):
        problems.append(f"{where}: not an rtjob index entry; skipped")
        return None
    if row["schema"] > INDEX_SCHEMA:
        problems.append(f"{where}: an index entry of schema {row['schema']}, newer than this rtjob reads; skipped")
        return None
    parts = _entry_parts(key)
    assert parts is not None
    details = {name: row[name] for name in DETAILS if name in row}  # absent from an older rtjob's entries
    return {name: row.get(name) for name in FIELDS} | details | {KEY: parts[0]}


def _fold(rows: dict[str, Row], new: Iterable[Row]) -> None:
    """Per run id, the row from the greatest entry name."""
    for row in new:
        held = rows.get(row["id"])
        if held is None or held[KEY] < row[KEY]:
            rows[row["id"]] = row


def _index_seq(key: str) -> int | None:
    name = key[len(INDEX_OBJECTS_DIR) + 1:]
    seq = name.split("-", 1)[0]
    return int(seq) if name.endswith(".jsonl") and "-" in name and seq.isdigit() else None


# ---------------------------------------------------------------------------------------------
# Compacting: a new immutable index object, then what it holds deleted


def compact(objects: Objects, snapshot: Snapshot) -> str:
    """Fold ``snapshot`` into a new index object (sequence: the newest's + 1, a name of its own); once it exists,
    delete the entries and the older index objects it holds. Returns its key."""
    rows = dict(snapshot.rows)
    _fold(rows, (json.loads(line) for line in snapshot.lines))
    held = [_entry_parts(key)[0] for key in snapshot.entries]  # type: ignore[index]
    key = _write_index(objects, snapshot.seq + 1, rows.values(), snapshot.folded_indexes, held)
    _delete_held(objects, key, snapshot.entries, snapshot.folded_indexes)
    return key


def _write_index(objects: Objects, seq: int, rows: Iterable[Row], folded: list[str], entries: list[str]) -> str:
    ordered = sorted(rows, key=_newest_first)
    header = {"schema": INDEX_SCHEMA, "seq": seq, "runs": len(ordered), "written": index_stamp(_utcnow()),
              "indexes": sorted(folded), "entries": sorted(entries)}
    body = "\n".join([json.dumps(header, separators=(",", ":")),
                      *(json.dumps(row, separators=(",", ":")) for row in ordered)]) + "\n"
    key = index_object_name(seq, os.urandom(_NONCE_HEX // 2).hex())
    objects.put(key, body.encode(), if_absent=True)
    return key


def _delete_held(objects: Objects, key: str, entries: list[str], indexes: list[str]) -> None:
    """Only once the new object is there (read back): its entries, then the older index objects it folded."""
    if objects.head(key) is None:
        return
    _each(entries, objects.delete, objects)
    _each([k for k in indexes if (_index_seq(k) or 0) < (_index_seq(key) or 0)], objects.delete, objects)


def reindex(objects: Objects, records: Iterable[RunRecord], now: dt.datetime | None = None) -> str:
    """A new index from the run records (the truth): one row per record, as of ``now``; entries written since
    ``now`` (a run's end during the rebuild) win over the records read. Every index object and entry present is
    named as held, then deleted."""
    start = now or _utcnow()
    stamp = index_stamp(start)
    rows: dict[str, Row] = {}
    for record in records:
        _fold(rows, [{**entry_of(record), KEY: f"{stamp}-{record.id}-{'0' * _NONCE_HEX}.json"}])
    snapshot = read_index(objects)
    later = [row for row in snapshot.rows.values() if row[KEY][:len(stamp)] > stamp]
    _fold(rows, later)
    held = [_entry_parts(key)[0] for key in snapshot.entries]  # type: ignore[index]
    index_keys = [item.rel for item in objects.list(INDEX_OBJECTS_DIR) if _index_seq(item.rel) is not None]
    seq = max([snapshot.seq, *(_index_seq(k) or 0 for k in index_keys)]) + 1
    key = _write_index(objects, seq, rows.values(), index_keys, held)
    _delete_held(objects, key, snapshot.entries, index_keys)
    return key


# ---------------------------------------------------------------------------------------------
# Helpers


def record_of(row: Row) -> RunRecord:
    """A row as a (partial) RunRecord whose summary() and to_run_info() print as the full record's would."""
    git = None if row.get("git_commit") is None and row.get("git_dirty") is None else {
        "commit": row.get("git_commit"), "dirty": row.get("git_dirty")}
    return RunRecord(
        id=row["id"], job=row.get("job"), backend=row.get("backend") or "?", status=row.get("status") or "UNKNOWN",
        message=row.get("message"), start_time=row.get("start_time"), end_time=row.get("end_time"),
        storage_uri=row.get("storage_uri"), exit_code=row.get("exit_code"), address=row.get("address"),
        submitted_at=row.get("submitted_at"), updated_at=row.get("updated_at"), archived=bool(row.get("archived")),
        git=git, cost=None if row.get("cost_usd") is None else {"estimated_usd": row["cost_usd"]},
        user=row.get("user"), pipeline=row.get("pipeline"))


def record_summary(row: Row) -> Row:
    """``record_of(row).summary()``, made from the row alone (`rtjob runs -o json` of 100,000 runs)."""
    return {"id": row["id"], "job": row.get("job"), "backend": row.get("backend") or "?",
            "status": row.get("status") or "UNKNOWN", "message": row.get("message"),
            "start_time": row.get("start_time"), "end_time": row.get("end_time"),
            "storage_uri": row.get("storage_uri"), "exit_code": row.get("exit_code"), "address": row.get("address"),
            "submitted_at": row.get("submitted_at"), "updated_at": row.get("updated_at"),
            "archived": bool(row.get("archived")), "git_commit": row.get("git_commit"),
            "git_dirty": row.get("git_dirty"), "cost_usd": row.get("cost_usd")}


def summary_of(row: Row) -> Row:
    """What `rtjob runs -o json` prints of a row (RunRecord.summary()'s keys, in its order)."""
    return {name: row.get(name) for name in FIELDS[:-2]}


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _newest_first(row: Row) -> tuple[int, float, str]:
    """As storage.records lists records: newest start (else submit) first, undated last, then by id."""
    when = started(row)
    return (1, 0.0, row["id"]) if when is None else (0, -when.timestamp(), row["id"])


def _each(items: list[str], call: Callable[[str], Any], objects: Objects) -> list[Any]:
    if len(items) <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(min(CONCURRENCY, len(items)), thread_name_prefix="rtjob-index-read") as pool:
        return list(pool.map(call, items))


# ---------------------------------------------------------------------------------------------
# What `rtjob runs --storage ROOT` calls


@dataclass
class Indexed:
    """A team's runs as the index lists them (newest first, ``query`` applied) and what went wrong."""

    rows: list[Row]
    problems: list[str]
    compacted: str | None = None  # the index object this listing wrote, if it compacted


def list_indexed(root_uri: str, endpoint: str | None, query: RunFilter, *, compact_after: int = COMPACT_AFTER,
                 objects: Objects | None = None) -> Indexed | None:
    """The runs the index under ``root_uri`` holds (None: the root has no index yet: list its records). When
    ``compact_after`` objects or more are left over beyond the newest index object, the listing compacts them
    (a failure to, e.g. read-only credentials, is a problem line, never a failed listing). ``objects``: the
    root's, which the caller closes (else opened and closed here)."""
    own = objects is None
    objects = objects or index_objects(root_uri, endpoint)
    try:
        snapshot = read_index(objects)
        if not snapshot.present:
            return None
        listed = Indexed(list(snapshot.runs(query)), snapshot.problems)
        if snapshot.leftover() >= compact_after and not snapshot.problems:
            try:
                listed.compacted = compact(objects, snapshot)
            except BadInput as exc:
                listed.problems.append(f"run index not compacted: {exc.message}")
            except Exception as exc:  # an S3 error worded by s3_error, a lost write: the listing stands
                message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
                listed.problems.append(f"run index not compacted: {message}")
        return listed
    finally:
        if own:
            objects.close()


def rebuild(root_uri: str, endpoint: str | None) -> tuple[int, list[str], str]:
    """``--reindex``: the index rebuilt from every run record under ``root_uri``; returns the number of runs,
    the records' problems (as list_records reports them) and the new index object's key."""
    from .records import list_records

    start = _utcnow()
    listed = list_records(root_uri, endpoint)
    objects = index_objects(root_uri, endpoint)
    try:
        key = reindex(objects, listed.records, now=start)
    finally:
        objects.close()
    problems = list(listed.problems)
    if listed.without_record:
        problems.append(f"{listed.without_record} run folder(s) without a record (not indexed)")
    return len(listed.records), problems, key
