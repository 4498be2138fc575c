"""Compacting the run index (storage/index.py says how it works): a new immutable index object folding what a read
found, then, once it exists, what it holds deleted; and a new index rebuilt from the run records (``--reindex``)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable

from rtjob_contract import INDEX_OBJECTS_DIR, INDEX_SCHEMA, index_object_name, index_stamp

from ..core import clock
from ..core.record import RunRecord
from .index_entries import KEY, NONCE_HEX, Row, entry_of, entry_parts
from .index_reader import Snapshot, each, fold, index_seq, newest_first, read_index
from .objects import Objects


def compact(objects: Objects, snapshot: Snapshot) -> str:
    """Fold ``snapshot`` into a new index object (sequence: the newest's + 1, a name of its own); once it exists,
    delete the entries and the older index objects it holds. Returns its key."""
    rows = dict(snapshot.rows)
    fold(rows, (json.loads(line) for line in snapshot.lines))
    held = [entry_parts(key)[0] for key in snapshot.entries]  # type: ignore[index]
    key = _write_index(objects, snapshot.seq + 1, rows.values(), snapshot.folded_indexes, held)
    _delete_held(objects, key, snapshot.entries, snapshot.folded_indexes)
    return key


def _write_index(objects: Objects, seq: int, rows: Iterable[Row], folded: list[str], entries: list[str]) -> str:
    ordered = sorted(rows, key=newest_first)
    header = {"schema": INDEX_SCHEMA, "seq": seq, "runs": len(ordered), "written": index_stamp(clock.now()),
              "indexes": sorted(folded), "entries": sorted(entries)}
    body = "\n".join([json.dumps(header, separators=(",", ":")),
                      *(json.dumps(row, separators=(",", ":")) for row in ordered)]) + "\n"
    key = index_object_name(seq, os.urandom(NONCE_HEX // 2).hex())
    objects.put(key, body.encode(), if_absent=True)
    return key


def _delete_held(objects: Objects, key: str, entries: list[str], indexes: list[str]) -> None:
    """Only once the new object is there (read back): its entries, then the older index objects it folded."""
    if objects.head(key) is None:
        return
    each(entries, objects.delete)
    each([k for k in indexes if (index_seq(k) or 0) < (index_seq(key) or 0)], objects.delete)


def reindex(objects: Objects, records: Iterable[RunRecord], now: dt.datetime | None = None) -> str:
    """A new index from the run records (the truth): one row per record, as of ``now``; entries written since
    ``now`` (a run's end during the rebuild) win over the records read. Every index object and entry present is
    named as held, then deleted."""
    start = now or clock.now()
    stamp = index_stamp(start)
    rows: dict[str, Row] = {}
    for record in records:
        fold(rows, [{**entry_of(record), KEY: f"{stamp}-{record.id}-{'0' * NONCE_HEX}.json"}])
    snapshot = read_index(objects)
    later = [row for row in snapshot.rows.values() if row[KEY][:len(stamp)] > stamp]
    fold(rows, later)
    held = [entry_parts(key)[0] for key in snapshot.entries]  # type: ignore[index]
    index_keys = [item.rel for item in objects.list(INDEX_OBJECTS_DIR) if index_seq(item.rel) is not None]
    seq = max([snapshot.seq, *(index_seq(k) or 0 for k in index_keys)]) + 1
    key = _write_index(objects, seq, rows.values(), index_keys, held)
    _delete_held(objects, key, snapshot.entries, index_keys)
    return key
