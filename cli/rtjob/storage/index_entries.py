"""The run index's entries (storage/index.py says how the index works): what one holds (its schema: a run's listed
fields and DETAILS: core/index_entry.py), the call a record's writer makes (client, companion, supervisor) to write one, and an entry's
row back as a record or a summary.

Importable on the cluster: the stdlib, rtjob_contract and rtjob's storage modules at module level only (the S3
client is made inside ``index_objects``)."""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from rtjob_contract import INDEX_ENTRIES_DIR, INDEX_SCHEMA, index_entry_name, index_stamp

from ..core import clock
from ..core.errors import BadInput
from ..core.index_entry import DETAILS, FIELDS, entry_of
from ..core.record import RunRecord
from .location import Location, parse_location
from .objects import Objects

# The schema (FIELDS, DETAILS, entry_of) is the kernel's: core/index_entry.py.
KEY = "entry"  # a row's field: the name (below entries/) of the entry it came from; absent from what is printed
MAX_ENTRY_BYTES = 256 * 1024
CONCURRENCY = 16  # requests at once to one storage root
NONCE_HEX = 12

Row = dict[str, Any]


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


def write_entry(root_uri: str, endpoint: str | None, record: RunRecord, *, objects: Objects | None = None,
                now: dt.datetime | None = None) -> str:
    """One entry for ``record`` below ``root_uri`` (created if absent: a name of its own); returns its key
    relative to the root. Written at each status change of the run (core/lifecycle.write), never at a heartbeat."""
    stamp = index_stamp(now or clock.now())
    run_id = _plain_id(record.id)
    key = index_entry_name(stamp, run_id, os.urandom(NONCE_HEX // 2).hex())
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


def entry_parts(rel: str) -> tuple[str, str] | None:
    """An entry's (name below entries/, run id) from its key; None: not an entry's name."""
    name = rel[len(INDEX_ENTRIES_DIR) + 1:]
    stem = name[:-len(".json")] if name.endswith(".json") else ""
    stamp_len = len(index_stamp(dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)))
    if "/" in name or len(stem) < stamp_len + NONCE_HEX + 3 or stem[stamp_len] != "-" \
            or stem[-NONCE_HEX - 1] != "-":
        return None
    return name, stem[stamp_len + 1:-NONCE_HEX - 1]


def entry_row(data: bytes, where: str, key: str, problems: list[str]) -> Row | None:
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
    parts = entry_parts(key)
    assert parts is not None
    details = {name: row[name] for name in DETAILS if name in row}  # absent from an older rtjob's entries
    return {name: row.get(name) for name in FIELDS} | details | {KEY: parts[0]}


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
