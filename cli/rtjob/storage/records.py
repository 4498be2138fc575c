"""Run records and archived logs in a run's storage (``<root>/<job>/<run id>/rtjob-run.json``, ``.../logs/``), and
a team's runs listed from a bucket by their records alone.

A run's folder also holds its checkpoints (tens of thousands of keys on a long run), so a listing never walks a
folder's keys: ``<root>/`` and each ``<root>/<job>/`` are listed with a delimiter (their folders only), then each run
folder's record is read by one GET, many at once. A run folder without a record (a run of an older rtjob, or one
still being written) is counted, not an error; a record that cannot be read is one line in ``problems``.

Every reader here waits out a storage fault that may pass for a reader's patience (storage/retrying.reading), then
raises it (StorageError, exit 3); a permanent one (no bucket, denied, no credentials) at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rtjob_contract import (
    DRIVER_LOG_FILE,
    EPOCH_CHECKPOINT_PREFIX,
    INDEX_DIR,
    LOG_PART_PREFIX,
    RUN_LOGS_DIR,
    RUN_RECORD_FILE,
    attempt_log_name,
)

from ..core import clock
from ..core.errors import BadInput, RtjobError, StorageError
from ..core.record import RunRecord
from .layout import NothingStored, checkpoint_of, find_history, load_history, natural_key
from .location import Location, parse_location
from .opening import open_store
from .raytrain import CHECKPOINT_KEY, SNAPSHOT_FILE, parse_snapshot_rows
from .results import NoHistory, RunHistory, history_from_location, summary
from .retrying import reading
from .stores import Store, check_rel

MAX_RECORD_BYTES = 16 * 1024 * 1024  # a record is a few KB; its request and spec bound the rest

if TYPE_CHECKING:
    from .objects import Objects

T = TypeVar("T")


@dataclass
class Listed:
    """A team's runs as their records say, newest first, and what could not be read."""

    records: list[RunRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each: a corrupt record, one of a newer rtjob
    without_record: int = 0  # run folders with no record (runs of an older rtjob, or not yet written)
    jobs: int = 0  # job folders listed


# ---------------------------------------------------------------------------------------------
# One run's record and logs


def update_record(run_uri: str, endpoint: str | None, change: Callable[[RunRecord | None], RunRecord | None],
                  tries: int = 30) -> RunRecord | None:
    """Read-modify-write of the run's record by one of its several writers (the submitting client, the run's
    companion, a supervisor, a client completing a run it saw end): ``change`` gets the stored record (None:
    none yet) and returns the record to write (None: nothing to write). The write is conditional on the version
    read (If-Match; a first record If-None-Match), so a writer that lost a race reads again instead of
    replacing another's write. Readers see the old record or the new one, never half of one."""
    from .objects import PreconditionFailed
    from .opening import objects_for

    where = _child(parse_location(run_uri), RUN_RECORD_FILE)
    with objects_for(run_uri, endpoint) as objects:
        for attempt in range(tries):
            got = objects.get(RUN_RECORD_FILE, MAX_RECORD_BYTES)
            stored = None if got is None else RunRecord.loads(got.data, where)
            new = change(stored)
            if new is None:
                return stored
            data = json.dumps(new.to_json(), indent=2).encode() + b"\n"
            try:
                if got is None:
                    objects.put(RUN_RECORD_FILE, data, if_absent=True)
                else:
                    objects.put(RUN_RECORD_FILE, data, if_match=got.etag)
                return new
            except PreconditionFailed:
                time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
    raise RtjobError(f"{where}: the run record kept changing under {tries} tries to update it")


def withdraw_record(run_uri: str, endpoint: str | None, written: RunRecord) -> bool:
    """The record ``written`` removed again while the run's folder still holds exactly it: the record a storage
    check wrote (runs/lifecycle/storage_check.py) of a run whose submit then failed, so storage claims no run that
    never went. A record another writer changed since (the run side saw the run start after all) stays. True:
    removed (a local run folder left empty goes too)."""
    from .opening import objects_for

    location = parse_location(run_uri)
    with objects_for(run_uri, endpoint) as objects:
        got = objects.get(RUN_RECORD_FILE, MAX_RECORD_BYTES)
        if got is None or RunRecord.loads(got.data, _child(location, RUN_RECORD_FILE)).to_json() != written.to_json():
            return False
        objects.delete(RUN_RECORD_FILE)
    if location.scheme == "file":
        with contextlib.suppress(OSError):
            os.rmdir(location.path)  # only when empty: nothing else was written there
    return True


@reading
def read_record(run_uri: str, endpoint: str | None) -> RunRecord | None:
    """The run's record (None: the folder has none); a corrupt or newer one is one line of bad input."""
    location = parse_location(run_uri)
    raw = _with_store(run_uri, endpoint, lambda store: store.get_bytes(RUN_RECORD_FILE, MAX_RECORD_BYTES))
    return None if raw is None else RunRecord.loads(raw, _child(location, RUN_RECORD_FILE))


def write_log(run_uri: str, name: str, text: str, endpoint: str | None) -> str:
    """Archive a log as ``<run_uri>/logs/<name>``; returns its path relative to the run's folder."""
    rel = _log_rel(name)
    data = text.encode("utf-8", errors="replace")  # a lone surrogate (undecodable output) becomes '?'
    _with_store(run_uri, endpoint, lambda store: store.put_bytes(rel, data))
    return rel


@reading
def log_chunks(run_uri: str, endpoint: str | None, attempt_id: str, tail_lines: int | None = None,
               chunk: int = 1 << 20, latest: bool = True) -> Iterator[str] | None:
    """A run's stored log as text chunks that end at line ends (a secret is never cut in two for the redactor),
    never read whole: the parts the run's companion wrote for ``attempt_id`` (logs/<attempt>/part-NNNNNN, in
    order), else (``latest``: the run's latest attempt) the archived ``logs/driver.log``, else the attempt's archived
    ``logs/<attempt>.log``; None when none is there. ``tail_lines``: only the last N lines (parts read from
    the end until they hold N)."""
    from .opening import objects_for

    objects = objects_for(run_uri, endpoint)
    try:
        parts = [item.rel for item in objects.list(f"{RUN_LOGS_DIR}/{_segment(attempt_id, 'attempt id')}")
                 if item.rel.rsplit("/", 1)[-1].startswith(LOG_PART_PREFIX)]
    except BaseException:
        objects.close()
        raise
    if parts:
        if tail_lines:
            return _tail(objects, parts, tail_lines)
        return _lines_aligned(block for rel in parts for block in objects.stream(rel, chunk))
    wholes = [f"{RUN_LOGS_DIR}/{attempt_log_name(attempt_id)}"]  # the latest attempt's is also driver.log
    for whole in ([f"{RUN_LOGS_DIR}/{DRIVER_LOG_FILE}"] if latest else []) + wholes:
        try:
            there = objects.head(whole) is not None
        except BaseException:
            objects.close()
            raise
        if there:
            if tail_lines:
                return _tail(objects, [whole], tail_lines)
            return _lines_aligned(objects.stream(whole, chunk))
    objects.close()
    return None


def archive_attempt_log(run_uri: str, endpoint: str | None, attempt_id: str) -> str | None:
    """``logs/<attempt id>.log`` from the attempt's log parts, when its companion could not write it (its node
    was lost): created only if absent, never replacing the companion's. Returns its name relative to the run's
    folder, None when the attempt has no parts."""
    import contextlib
    import tempfile

    from .objects import PreconditionFailed
    from .opening import objects_for

    rel = f"{RUN_LOGS_DIR}/{attempt_log_name(attempt_id)}"
    with objects_for(run_uri, endpoint) as objects:
        if objects.head(rel) is not None:
            return rel
        parts = [item.rel for item in objects.list(f"{RUN_LOGS_DIR}/{_segment(attempt_id, 'attempt id')}")
                 if item.rel.rsplit("/", 1)[-1].startswith(LOG_PART_PREFIX)]
        if not parts:
            return None
        with tempfile.NamedTemporaryFile(prefix="rtjob-log-") as joined:
            for part in parts:
                for block in objects.stream(part):
                    joined.write(block)
            joined.flush()
            with contextlib.suppress(PreconditionFailed):  # its companion (or another reader) wrote it first
                objects.put_file(rel, joined.name, if_absent=True)
    return rel


def _lines_aligned(blocks: Iterator[bytes]) -> Iterator[str]:
    rest = b""
    for block in blocks:
        block = rest + block
        cut = block.rfind(b"\n") + 1
        rest = block[cut:]
        if cut:
            yield block[:cut].decode("utf-8", errors="replace")
    if rest:
        yield rest.decode("utf-8", errors="replace")


def _tail(objects: Objects, rels: list[str], lines: int) -> Iterator[str]:
    """The last ``lines`` lines of the objects ``rels`` joined: whole objects read from the last one back (a
    part is at most a few MiB; a whole driver.log is read in chunks, keeping only its last lines)."""
    from collections import deque

    kept: deque[bytes] = deque(maxlen=lines)
    for rel in reversed(rels):
        found: deque[bytes] = deque(maxlen=lines)
        for text in _lines_aligned(objects.stream(rel)):
            found.extend(text.encode().splitlines(keepends=True))
        kept.extendleft(reversed(found))
        if len(kept) >= lines and len(found) >= 1:
            break
    yield b"".join(list(kept)[-lines:]).decode("utf-8", errors="replace")


def _log_rel(name: str) -> str:
    if "/" in name:
        raise BadInput(f"{name!r}: a log's name is one path segment")
    return check_rel(f"{RUN_LOGS_DIR}/{name}")


# ---------------------------------------------------------------------------------------------
# A team's runs, from the bucket


@reading
def list_records(root_uri: str, endpoint: str | None, *, job: str | None = None, concurrency: int = 16) -> Listed:
    """Every run record under ``<root>/<job>/<run id>/`` (only ``job``'s folder when given), newest first."""
    root = parse_location(root_uri)
    listed = Listed()
    store = open_store(root, endpoint, concurrency)
    try:
        jobs = [_segment(job, "job")] if job is not None else _plain(root, store.list_dirs(), listed)
        listed.jobs = len(jobs)
        runs = [(name, run) for name, found in zip(jobs, _each(jobs, store.list_dirs, concurrency), strict=True)
                for run in _plain(root, found, listed, name)]
        raws = _each([f"{name}/{run}/{RUN_RECORD_FILE}" for name, run in runs],
                     lambda rel: _get_record(store, rel), concurrency)
    finally:
        store.close()
    for (name, run), raw in zip(runs, raws, strict=True):
        if raw is None:
            listed.without_record += 1
        elif isinstance(raw, RtjobError):
            listed.problems.append(raw.message)
        else:
            try:
                listed.records.append(RunRecord.loads(raw, _child(root, name, run, RUN_RECORD_FILE)))
            except BadInput as exc:
                listed.problems.append(exc.message)
    listed.records.sort(key=_newest_first)
    return listed


@reading
def check_root(root_uri: str, endpoint: str | None) -> None:
    """One delimiter listing of ``root_uri`` (its job folders): the StorageError of a root that cannot be read
    (`rtjob ui --storage` before it serves), a fault that may pass waited out first."""
    store = open_store(parse_location(root_uri), endpoint, concurrency=1)
    try:
        store.list_dirs()
    finally:
        store.close()


@reading
def find_record(root_uri: str, run_id: str, endpoint: str | None) -> tuple[str, RunRecord] | None:
    """The folder and record of run ``run_id`` under any job folder of ``root_uri`` (None: no record of it):
    one delimiter listing of the root, then one GET per job folder."""
    root = parse_location(root_uri)
    run_id = _segment(run_id, "run id")
    store = open_store(root, endpoint)
    try:
        jobs = _plain(root, store.list_dirs(), Listed())
        raws = _each([f"{job}/{run_id}/{RUN_RECORD_FILE}" for job in jobs], lambda rel: _get_record(store, rel), 16)
    finally:
        store.close()
    found: list[tuple[str, RunRecord]] = []
    problems: list[RtjobError] = []
    for job, raw in zip(jobs, raws, strict=True):
        if isinstance(raw, RtjobError):
            problems.append(raw)
        elif raw is not None:
            try:
                found.append((_child(root, job, run_id), RunRecord.loads(raw, _child(root, job, run_id,
                                                                                     RUN_RECORD_FILE))))
            except BadInput as exc:
                problems.append(exc)
    if not found:
        if problems:
            raise problems[0]
        return None
    return max(found, key=lambda pair: pair[1].updated_at or "")  # the same id under two jobs: the latest written


def _get_record(store: Store, rel: str) -> bytes | RtjobError | None:
    try:
        return store.get_bytes(rel, MAX_RECORD_BYTES)
    except BadInput as exc:  # too large, a link, unreadable: this run's problem, not the listing's
        return exc
    except StorageError as exc:
        if exc.transient:  # the storage may come back: the whole read is tried again (records.reading)
            raise
        return exc  # denied on this one record (the listing itself was allowed): this run's problem


def _each(items: list[str], call: Callable[[str], T], concurrency: int) -> list[T]:
    """``call`` on every item, ``concurrency`` at a time (botocore clients are thread-safe), in order."""
    from concurrent.futures import ThreadPoolExecutor

    if len(items) <= 1:
        return [call(item) for item in items]
    pool = ThreadPoolExecutor(max(1, min(concurrency, len(items))), thread_name_prefix="rtjob-records")
    try:
        results = list(pool.map(call, items))
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # an error or Ctrl-C: finish only the requests in flight
        raise
    pool.shutdown()
    return results


def _plain(root: Location, names: list[str], listed: Listed, parent: str = "") -> list[str]:
    """The folder names rtjob can address (one plain segment); another is a problem line, not a failure."""
    kept = []
    for name in names:
        if not parent and name == INDEX_DIR:  # the run index beside the job folders (storage/index.py)
            continue
        try:
            kept.append(check_rel(name))
        except BadInput:
            listed.problems.append(f"{_child(root, parent)}: skipped a folder named {name!r} "
                                   "(not a plain folder name)")
    return kept


def _segment(name: str, what: str) -> str:
    if not name or "/" in name:
        raise BadInput(f"{what} {name!r}: expected one folder name")
    return check_rel(name)


def _child(location: Location, *parts: str) -> str:
    """The URI (or path) of a file or folder below a location."""
    path = "/".join(p for p in (location.path, *parts) if p)
    return Location(location.scheme, location.bucket, path).uri


def _newest_first(record: RunRecord) -> tuple[int, float, str]:
    when = record.start_time or record.submitted_at
    if not when:
        return (1, 0.0, record.id)  # undated records last
    try:
        return (0, -clock.parse(when).timestamp(), record.id)
    except ValueError:
        return (1, 0.0, record.id)


# ---------------------------------------------------------------------------------------------
# What `rtjob show` adds from the run's folder: its checkpoints and its metrics


@reading
def checkpoints(run_uri: str, endpoint: str | None) -> list[dict[str, Any]]:
    """The run's checkpoint folders, oldest first: name, files, bytes, and the metrics of its epoch when the
    run's history (one small file, read once) has them. Lists the run's folder fully (one run)."""
    location = parse_location(run_uri)
    store = open_store(location, endpoint, concurrency=4)
    try:
        try:
            files = store.list_files()
        except BadInput:  # a local folder that does not exist: no checkpoints
            return []
        by_ckpt: dict[str, dict[str, Any]] = {}
        for item in files:
            ckpt = checkpoint_of(item.rel)
            if ckpt:
                entry = by_ckpt.setdefault(ckpt, {"name": ckpt, "files": 0, "bytes": 0, "metrics": None})
                entry["files"] += 1
                entry["bytes"] += item.size
        rows = _metrics_by_checkpoint(store, files)
    finally:
        store.close()
    out = [by_ckpt[name] for name in sorted(by_ckpt, key=natural_key)]
    for entry in out:
        entry["metrics"] = rows.get(entry["name"])
    return out


def _metrics_by_checkpoint(store: Store, files: list[Any]) -> dict[str, dict[str, Any]]:
    """checkpoint name → its epoch's row: from the newest history (rtjob's layout, by epoch) or Ray Train's
    snapshot (by folder). A history that cannot be read adds no metrics (show still lists the checkpoints)."""
    history = find_history(files)
    snapshot = next((f for f in files if f.rel == SNAPSHOT_FILE), None)
    found = history or snapshot
    if found is None:
        return {}
    where = f"{store.location.uri}/{found.rel}"
    try:
        if history is not None:
            rows = load_history(lambda limit: store.read(found, limit), where)
            by_epoch = {row.get("epoch"): row for row in rows}
            names = {checkpoint_of(f.rel) for f in files} - {None}
            return {name: by_epoch[_epoch_of(name)] for name in names
                    if name and _epoch_of(name) in by_epoch}
        rows = load_history(lambda limit: store.read(found, limit), where, parse=parse_snapshot_rows)
        return {row[CHECKPOINT_KEY]: row for row in rows}
    except BadInput:
        return {}


def _epoch_of(name: str) -> int | None:
    digits = name[len(EPOCH_CHECKPOINT_PREFIX):] if name.startswith(EPOCH_CHECKPOINT_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def metrics_summary(run_uri: str, endpoint: str | None) -> dict[str, Any] | None:
    """The run's final metrics (``rtjob results``' summary: last values, best val_loss and its epoch) and the
    last row as stored; None when the run stored no history. A corrupt history is one line of bad input."""
    location = parse_location(run_uri)
    if location.scheme == "file" and not os.path.isdir(location.path):
        return None
    try:
        rows, source = history_from_location(location, endpoint)
    except (NothingStored, NoHistory):
        return None
    if not rows:
        return None
    return {**summary(RunHistory(location.name, source, rows)), "last": rows[-1], "source": source}


def _with_store(run_uri: str, endpoint: str | None, call: Callable[[Store], T]) -> T:
    store = open_store(parse_location(run_uri), endpoint, concurrency=1)
    try:
        return call(store)
    finally:
        store.close()

