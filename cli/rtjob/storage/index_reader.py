"""Reading the run index (storage/index.py says how it works): the newest index object, the ones it did not fold, the
entries left over, folded per run (the greatest entry name wins) into a Snapshot that lists the runs newest first as
a run filter keeps them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rtjob_contract import INDEX_ENTRIES_DIR, INDEX_OBJECTS_DIR, INDEX_SCHEMA

from ..core.errors import BadInput
from .index_entries import CONCURRENCY, KEY, MAX_ENTRY_BYTES, Row, entry_parts, entry_row
from .objects import Objects
from .run_filter import RunFilter, started

MAX_INDEX_BYTES = 2 * 1024 * 1024 * 1024
READ_TRIES = 5  # a listing re-read after a compactor deleted what it had listed; then a problem line
_PARSE_ONE_BY_ONE = 1000  # a listing of up to this many runs parses the newest index object's lines as it reaches them


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
        for row in _merged(newest, sorted(extra.values(), key=newest_first)):
            if query.keeps(row):
                yield row
                count += 1
                if query.limit is not None and count >= query.limit:
                    return

    def leftover(self) -> int:
        """How many objects a compaction would fold beyond the newest index object."""
        return len(self.folded_indexes) - (1 if self.newest else 0) + len(self.entries)


def _merged(newest: Iterator[Row], extra: list[Row]) -> Iterator[Row]:
    """heapq.merge(newest, extra, key=newest_first) (a tie: newest's first), the rest of ``newest`` as it is once
    ``extra`` (a few entries) is used up: its rows' times are not parsed."""
    keys = [newest_first(row) for row in extra]
    at = 0
    for row in newest:
        if at < len(extra):
            key = newest_first(row)
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
    index_keys = [item.rel for item in objects.list(INDEX_OBJECTS_DIR) if index_seq(item.rel) is not None]
    snapshot = Snapshot(present=bool(entry_keys or index_keys))
    held: set[str] = set()
    if index_keys:
        newest = max(index_keys, key=lambda key: (index_seq(key), key))
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
            fold(snapshot.rows, (json.loads(line) for line in other[1]))
            snapshot.folded_indexes.append(key)
        snapshot.folded_indexes += [key for key in index_keys if key in folded]
    named = [(key, parts[0]) for key in entry_keys if (parts := entry_parts(key)) is not None]
    wanted = [key for key, name in named if name not in held]
    raws = each(wanted, lambda key: objects.get(key, MAX_ENTRY_BYTES))
    skipped: set[str] = set()
    for key, raw in zip(wanted, raws, strict=True):
        if raw is None:
            return None  # deleted since it was listed: a newer index object holds it
        row = entry_row(raw.data, f"{objects.uri}/{key}", key, snapshot.problems)
        if row is None:
            skipped.add(key)  # never counted as held: a compaction leaves it where it is
        else:
            fold(snapshot.rows, [row])
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


def fold(rows: dict[str, Row], new: Iterable[Row]) -> None:
    """Per run id, the row from the greatest entry name."""
    for row in new:
        held = rows.get(row["id"])
        if held is None or held[KEY] < row[KEY]:
            rows[row["id"]] = row


def index_seq(key: str) -> int | None:
    name = key[len(INDEX_OBJECTS_DIR) + 1:]
    seq = name.split("-", 1)[0]
    return int(seq) if name.endswith(".jsonl") and "-" in name and seq.isdigit() else None


def newest_first(row: Row) -> tuple[int, float, str]:
    """As storage.records lists records: newest start (else submit) first, undated last, then by id."""
    when = started(row)
    return (1, 0.0, row["id"]) if when is None else (0, -when.timestamp(), row["id"])


def each(items: list[str], call: Callable[[str], Any]) -> list[Any]:
    """``call`` on every item, up to CONCURRENCY at once, the results in order."""
    if len(items) <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(min(CONCURRENCY, len(items)), thread_name_prefix="rtjob-index-read") as pool:
        return list(pool.map(call, items))
