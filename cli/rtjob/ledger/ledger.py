"""The local run ledger: one SQLite file under $RTJOB_HOME, one row per run id, holding its RunRecord.

Several rtjob processes of one user write it at once (parallel CI jobs, a follower and a `status`): the file
is in WAL mode (readers never block the writer), every write is one short transaction that waits up to
BUSY_TIMEOUT_S for another's lock, and read-modify-write (``update``) holds the write lock from its read to its
write (BEGIN IMMEDIATE), so no update is lost. The schema is versioned with ``PRAGMA user_version`` and
migrated forward in one transaction; a ledger from a newer rtjob, or a file that is not one, is refused with
one line (BadInput) and never written to. Damage inside a ledger is reported (same line) when SQLite meets it;
rtjob does not scan the whole file at every start.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core import clock
from ..core.errors import BadInput, RtjobError
from ..core.index_entry import ledger_summary
from ..core.model import RunStatus
from ..core.record import RunRecord
from ..jobspec.project import rtjob_home

LEDGER_FILE = "ledger.sqlite3"
BUSY_TIMEOUT_S = 30.0
ENDED = tuple(s.value for s in RunStatus if s.terminal)

# MIGRATIONS[i] takes a ledger from schema i to i + 1 (one transaction for all the steps a file needs).
# To change the layout, append an entry; never edit a released one.
MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: one row per run. `started` is the sort key: the run's start (or submit) time in one fixed-width UTC
       # form, else when it was first seen, so ISO text order is time order. `summary` is ledger_summary()
       # of `record` (core/index_entry.py), written with it: `rtjob runs -o json` reads it, not whole records.
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            job TEXT,
            backend TEXT NOT NULL,
            status TEXT NOT NULL,
            started TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            archived INTEGER NOT NULL DEFAULT 0,
            summary TEXT NOT NULL,
            record TEXT NOT NULL
        )""",
        # Newest-first listings walk this index; it holds every column summaries() reads or filters on, so
        # `runs -o json` never reads the (much larger) records: a third less time at 10,000 entries.
        "CREATE INDEX runs_listing ON runs (started, id, job, status, backend, summary)",
        "CREATE INDEX runs_unarchived ON runs (backend, started) WHERE archived = 0",
    ),
]
SCHEMA_VERSION = len(MIGRATIONS)

_UPSERT = """
INSERT INTO runs (id, job, backend, status, started, updated_at, archived, summary, record)
VALUES (:id, :job, :backend, :status, COALESCE(:started, :now), :now, :archived, :summary, :record)
ON CONFLICT (id) DO UPDATE SET
    job = excluded.job, backend = excluded.backend, status = excluded.status,
    started = COALESCE(:started, runs.started), updated_at = excluded.updated_at,
    archived = excluded.archived, summary = excluded.summary, record = excluded.record
"""
_NEWEST_FIRST = "ORDER BY started DESC, id DESC"


def ledger_path() -> Path:
    """``$RTJOB_HOME/ledger.sqlite3`` (``~/.rtjob/ledger.sqlite3`` by default)."""
    return rtjob_home() / LEDGER_FILE


def sort_time(value: str | dt.datetime | None) -> str | None:
    """An ISO time (or datetime) as fixed-width UTC text, so text order is time order; None if unreadable.
    A time without a zone is taken as UTC (backends report UTC); a naive datetime as local time (Python's rule)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = clock.parse(value.strip().replace("z", "Z"))  # a time without a zone: UTC
        except ValueError:
            return None
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextlib.contextmanager
def _write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (take the write lock before the first read, waiting up to the busy timeout), COMMIT,
    or ROLLBACK on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class Ledger:
    """The runs this machine's rtjob submitted or saw. Nothing is read or created until first used; reading
    a ledger that does not exist yet gives nothing and creates nothing.

    Entries whose stored JSON no longer reads as a run record (hand-edited, or from a newer rtjob) are skipped
    by the listing methods: each call that skipped some adds ONE line to ``warnings`` (and passes it to
    ``warn``, if given) naming the ledger and the run ids; ``get``/``update`` of such an id raise BadInput.
    """

    def __init__(self, path: Path | str | None = None, *, warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path) if path is not None else ledger_path()
        self.warn = warn
        self.warnings: list[str] = []
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()  # one connection, shared by a follower's threads (and an update's change)

    @classmethod
    def default(cls, *, warn: Callable[[str], None] | None = None) -> Ledger:
        """The ledger under $RTJOB_HOME (a new handle: hold on to it rather than calling this per poll)."""
        return cls(warn=warn)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing

    def save(self, record: RunRecord) -> None:
        """Insert or replace the whole record (its ``updated_at`` becomes now). For a change that depends on
        what is stored (another process may have written since you read it), use ``update``."""
        with self._connection(create=True) as conn:
            assert conn is not None
            conn.execute(_UPSERT, self._row(record))

    def save_many(self, records: Iterable[RunRecord]) -> int:
        """``save`` each record, all in one transaction (a bucket's runs imported at once); returns how many."""
        with self._connection(create=True) as conn:
            assert conn is not None
            rows = [self._row(r) for r in records]
            with _write_transaction(conn):
                conn.executemany(_UPSERT, rows)
        return len(rows)

    def update(self, run_id: str, change: Callable[[RunRecord], bool]) -> RunRecord | None:
        """Read the record, let ``change`` edit it in place, and write it back only if ``change`` returns True,
        all under the ledger's write lock (other writers wait; keep ``change`` quick: no network). Returns the
        record (changed or not), or None if the ledger has no such run."""
        with self._connection(create=False) as conn:
            if conn is None:
                return None
            with _write_transaction(conn):
                row = conn.execute("SELECT record FROM runs WHERE id = ?", (run_id,)).fetchone()
                record = self._parse(run_id, row[0]) if row else None
                if record is not None and change(record):
                    conn.execute(_UPSERT, self._row(record))
            return record

    def prune(self, *, older_than: dt.datetime | None = None, keep: int | None = None) -> int:
        """Forget entries of ENDED runs (SUCCEEDED, FAILED, STOPPED as last seen) that started before
        ``older_than`` (if given) and are not among the ``keep`` newest entries (if given; every entry counts).
        Entries of runs not seen to end are kept: they may still be running. Never touches storage or a
        cluster. Returns how many entries were forgotten."""
        if older_than is None and keep is None:
            raise ValueError("prune needs older_than or keep")
        with self._connection(create=False) as conn:
            if conn is None:
                return 0
            marks = ",".join("?" * len(ENDED))
            sql = f"DELETE FROM runs WHERE status IN ({marks})"
            params: list[Any] = list(ENDED)
            if older_than is not None:
                sql += " AND started < ?"
                params.append(sort_time(older_than))
            if keep is not None:
                sql += f" AND id NOT IN (SELECT id FROM runs {_NEWEST_FIRST} LIMIT ?)"
                params.append(max(keep, 0))
            return conn.execute(sql, params).rowcount

    # ---- reading

    def get(self, run_id: str) -> RunRecord | None:
        with self._connection(create=False) as conn:
            row = conn.execute("SELECT record FROM runs WHERE id = ?", (run_id,)).fetchone() if conn else None
        return self._parse(run_id, row[0]) if row else None

    def query(self, *, job: str | None = None, status: str | None = None, backend: str | None = None,
              since: dt.datetime | None = None, limit: int | None = 50) -> list[RunRecord]:
        """Records newest first (by start, else submit, else first-seen time); ``limit`` None: all of them."""
        rows = self._select("id, record", job=job, status=status, backend=backend, since=since, limit=limit)
        return self._records(rows)

    def summaries(self, *, job: str | None = None, status: str | None = None, backend: str | None = None,
                  since: dt.datetime | None = None, limit: int | None = 50) -> list[dict[str, Any]]:
        """The rows ``query`` would return as index_entry.ledger_summary dicts, from a column (no record parsed)."""
        rows = self._select("id, summary", job=job, status=status, backend=backend, since=since, limit=limit)
        out: list[dict[str, Any]] = []
        bad: list[str] = []
        for run_id, text in rows:
            try:
                out.append(json.loads(text))
            except ValueError:
                bad.append(run_id)
        self._skipped(bad, "its summary is not JSON")
        return out

    def unarchived(self, backend: str | None = None) -> list[RunRecord]:
        """Records not yet archived (``archived`` false), newest first: runs whose end is still to be saved."""
        sql = "SELECT id, record FROM runs WHERE archived = 0"
        params: list[Any] = []
        if backend is not None:
            sql += " AND backend = ?"
            params.append(backend)
        with self._connection(create=False) as conn:
            rows = conn.execute(f"{sql} {_NEWEST_FIRST}", params).fetchall() if conn else []
        return self._records(rows)

    def count(self) -> int:
        with self._connection(create=False) as conn:
            return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0]) if conn else 0

    def matching(self, *, job: str | None = None, status: str | None = None, backend: str | None = None,
                 since: dt.datetime | None = None) -> int:
        """How many runs ``query`` would return with no limit (`rtjob ui`'s pager), counted, not read."""
        where, params = self._where(job=job, status=status, backend=backend, since=since)
        with self._connection(create=False) as conn:
            return int(conn.execute(f"SELECT count(*) FROM runs{where}", params).fetchone()[0]) if conn else 0

    # ---- inside

    def _where(self, *, job: str | None, status: str | None, backend: str | None,
               since: dt.datetime | None) -> tuple[str, list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("job", job), ("status", status.upper() if status else None), ("backend", backend)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("started >= ?")
            params.append(sort_time(since))
        return (f" WHERE {' AND '.join(where)}" if where else ""), params

    def _select(self, columns: str, *, job: str | None, status: str | None, backend: str | None,
                since: dt.datetime | None, limit: int | None) -> list[tuple[str, str]]:
        where, params = self._where(job=job, status=status, backend=backend, since=since)
        sql = f"SELECT {columns} FROM runs{where} {_NEWEST_FIRST} LIMIT ?"
        params.append(-1 if limit is None else max(limit, 0))
        with self._connection(create=False) as conn:
            return conn.execute(sql, params).fetchall() if conn else []

    def _row(self, record: RunRecord) -> dict[str, Any]:
        record.updated_at = clock.now_iso("seconds")
        return {
            "id": record.id, "job": record.job, "backend": record.backend, "status": record.status,
            "started": sort_time(record.start_time) or sort_time(record.submitted_at),
            "now": sort_time(record.updated_at), "archived": int(record.archived),
            "summary": json.dumps(ledger_summary(record), separators=(",", ":")), "record": record.dumps(),
        }

    def _parse(self, run_id: str, text: str) -> RunRecord:
        return RunRecord.loads(text, f"{self.path}: run {run_id}")

    def _records(self, rows: list[tuple[str, str]]) -> list[RunRecord]:
        records: list[RunRecord] = []
        bad: list[str] = []
        for run_id, text in rows:
            try:
                records.append(self._parse(run_id, text))
            except BadInput:
                bad.append(run_id)
        self._skipped(bad, "not a run record this rtjob reads")
        return records

    def _skipped(self, run_ids: list[str], why: str) -> None:
        if not run_ids:
            return
        shown = ", ".join(run_ids[:3]) + (f" and {len(run_ids) - 3} more" if len(run_ids) > 3 else "")
        line = (f"{self.path}: skipped {len(run_ids)} unreadable entr{'y' if len(run_ids) == 1 else 'ies'} "
                f"({shown}): {why}")
        self.warnings.append(line)
        if self.warn is not None:
            self.warn(line)

    @contextlib.contextmanager
    def _connection(self, *, create: bool) -> Iterator[sqlite3.Connection | None]:
        """The open, migrated connection (None: no ledger yet and ``create`` false), under the thread lock;
        any SQLite error inside becomes one line naming the file."""
        with self._lock:
            try:
                if self._conn is None and (create or self.path.exists()):
                    self._conn = self._open()
                yield self._conn
            except sqlite3.Error as exc:
                raise self._error(exc) from None

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Created private (SQLite gives its -wal/-shm files the same mode); never truncated.
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        except OSError as exc:
            raise self._unwritable(exc.strerror or str(exc)) from None
        # A new file opened by several processes at once: SQLite answers some of their first reads and the switch
        # to WAL with "database is locked" at once, without its busy handler (another connection is changing the
        # journal mode or recovering the WAL index). Those are tried again until BUSY_TIMEOUT_S has passed.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            try:
                self._check(conn)  # the first reads: a file that is not (our) database fails here, unwritten
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")  # persistent: set once per file
                conn.execute("PRAGMA synchronous = NORMAL")  # WAL's durable-enough setting: a crash loses no commit
                self._migrate(conn)
                return conn
            except sqlite3.OperationalError as exc:
                conn.close()
                if not _busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            except BaseException:
                conn.close()
                raise

    def _check(self, conn: sqlite3.Connection) -> int:
        """The file's schema version; BadInput if it is newer than this rtjob's or the file holds something else."""
        # One statement, one snapshot: read apart, another process's first migration could commit in between,
        # and its tables with the version read before it look like "a database of something else".
        version, tables = conn.execute(
            "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)").fetchone()
        version = int(version)
        if version > SCHEMA_VERSION:
            raise BadInput(f"{self.path} is from a newer rtjob (ledger schema {version}, this one reads up to "
                           f"{SCHEMA_VERSION}): upgrade rtjob, or set RTJOB_HOME to use another ledger")
        if version == 0 and tables:
            raise BadInput(f"{self.path} is not a readable rtjob ledger (an SQLite database of something else): "
                           "move it aside (rtjob never overwrites it), or set RTJOB_HOME to use another ledger")
        return version

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if self._check(conn) == SCHEMA_VERSION:
            return
        with _write_transaction(conn):  # one process migrates; the others wait, then find it done
            for steps in MIGRATIONS[self._check(conn):]:
                for sql in steps:
                    conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _error(self, exc: sqlite3.Error) -> RtjobError:
        reason = str(exc)
        if _busy(exc):
            return RtjobError(f"the run ledger {self.path} stayed locked by another rtjob process for "
                              f"{BUSY_TIMEOUT_S:.0f} s; try again")
        if isinstance(exc, sqlite3.OperationalError) and any(
                word in reason for word in ("unable to open", "readonly", "read-only", "permission")):
            return self._unwritable(reason)
        return BadInput(f"{self.path} is not a readable rtjob ledger ({reason}): move it aside (rtjob never "
                        "overwrites it), or set RTJOB_HOME to use another ledger")

    def _unwritable(self, reason: str) -> BadInput:
        return BadInput(f"cannot open the run ledger {self.path} ({reason}): make {self.path.parent} writable, "
                        "or set RTJOB_HOME to a writable folder")


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused for another connection's lock (it may pass), not for the file itself."""
    reason = str(exc)
    return "locked" in reason or "busy" in reason
