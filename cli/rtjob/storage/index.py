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

Its parts: index_entries.py (an entry's schema, its writer, a row back as a record), index_reader.py (a read: the
Snapshot), index_compaction.py (compact, reindex); here, what `rtjob runs --storage ROOT` and `rtjob ui` call. Every
part is importable on the cluster: the stdlib, rtjob_contract and rtjob's storage modules at module level only (the
S3 client is made inside ``index_objects``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtjob_contract import index_entry_name, index_stamp

from ..core import clock
from ..core.errors import StorageError, one_line
from .index_compaction import compact, reindex
from .index_entries import (
    DETAILS,
    FIELDS,
    KEY,
    Row,
    entry_of,
    index_objects,
    record_of,
    record_summary,
    root_of,
    write_entry,
    write_run_entry,
)
from .index_reader import Snapshot, index_seq, read_index
from .objects import Objects
from .retrying import reading
from .run_filter import RunFilter

__all__ = ["COMPACT_AFTER", "DETAILS", "FIELDS", "KEY", "Indexed", "Row", "Snapshot", "index_seq", "compact",
           "entry_of", "index_entry_name", "index_objects", "index_stamp", "list_indexed", "read_index", "rebuild",
           "record_of", "record_summary", "reindex", "root_of", "write_entry", "write_run_entry"]

COMPACT_AFTER = 200  # a reader compacts once this many entries (or a second index object) are left over


@dataclass
class Indexed:
    """A team's runs as the index lists them (newest first, ``query`` applied) and what went wrong."""

    rows: list[Row]
    problems: list[str]
    compacted: str | None = None  # the index object this listing wrote, if it compacted


@reading
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
            except StorageError as exc:
                if exc.transient:  # the storage may come back: the listing (read and compaction) is tried again
                    raise
                listed.problems.append(f"run index not compacted: {one_line(exc)}")
            except Exception as exc:  # bad input, a lost write: the listing stands
                listed.problems.append(f"run index not compacted: {one_line(exc)}")
        return listed
    finally:
        if own:
            objects.close()


def rebuild(root_uri: str, endpoint: str | None) -> tuple[int, list[str], str]:
    """``--reindex``: the index rebuilt from every run record under ``root_uri``; returns the number of runs,
    the records' problems (as list_records reports them) and the new index object's key."""
    from .records import list_records

    start = clock.now()
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
