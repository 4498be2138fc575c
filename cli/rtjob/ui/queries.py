"""What `rtjob ui` shows, as plain data: the runs (this machine's ledger, or a team's storage through its index), one
run (its record, steps, checkpoints, metrics, samples, log), a comparison. Calls the use cases in runs/ and
storage/ as the CLI does; reads no wire format itself and never writes to a run's storage (the index listing is
asked not to compact; only this machine's ledger learns the team runs it lists, as `rtjob runs --storage` does).

Everything returned here is still unredacted data: app.py passes it through the redaction boundary."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import BadInput, RtjobError
from ..core.model import RunStatus
from ..core.record import RunRecord

PAGE_SIZE = 50
LOG_TAIL_LINES = 1000
SORTS = ("start_time", "job", "status", "user", "backend", "cost_usd", "id")
MAX_COMPARE = 5


@dataclass
class RunsQuery:
    """The runs page's filters, search, sort and page, from its URL's query string (bad values: BadInput)."""

    job: str | None = None
    status: str | None = None
    user: str | None = None
    backend: str | None = None
    since: str | None = None
    q: str | None = None  # a case-insensitive search over id, job, user, message
    sort: str = "start_time"
    desc: bool = True
    page: int = 1

    @classmethod
    def parse(cls, params: dict[str, str]) -> RunsQuery:
        def text(name: str) -> str | None:
            value = (params.get(name) or "").strip()
            return value or None

        status = text("status")
        if status is not None:
            status = status.upper()
            if status not in {s.value for s in RunStatus}:
                raise BadInput(f"status {status!r}: expected one of {', '.join(s.value for s in RunStatus)}")
        sort = text("sort") or "start_time"
        if sort not in SORTS:
            raise BadInput(f"sort {sort!r}: expected one of {', '.join(SORTS)}")
        try:
            page = int(text("page") or "1")
        except ValueError:
            raise BadInput("page: expected a whole number") from None
        since = text("since")
        if since is not None:
            from ..jobspec.overrides import parse_duration

            parse_duration(since, "since")
        return cls(job=text("job"), status=status, user=text("user"), backend=text("backend"), since=since,
                   q=text("q"), sort=sort, desc=(text("order") or "desc") != "asc", page=max(1, page))

    def since_time(self) -> dt.datetime | None:
        if self.since is None:
            return None
        from ..jobspec.overrides import parse_duration

        return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=parse_duration(self.since, "since"))


@dataclass
class RunsPage:
    rows: list[dict[str, Any]]
    total: int  # runs that match, over every page
    page: int
    pages: int
    source: str  # "ledger" or the storage root listed
    problems: list[str] = field(default_factory=list)


def _matches(row: dict[str, Any], q: str) -> bool:
    needle = q.lower()
    return any(needle in str(row.get(name) or "").lower() for name in ("id", "job", "user", "message", "pipeline"))


def _sort_key(name: str) -> Any:
    def key(row: dict[str, Any]) -> tuple[int, Any]:
        value = row.get(name)
        if name == "start_time":
            value = row.get("start_time") or row.get("submitted_at")
        return (0, "") if value is None else (1, value)
    return key


def runs_page(query: RunsQuery, storage: str | None, endpoint: str | None) -> RunsPage:
    """One page of runs, newest first unless sorted otherwise."""
    problems: list[str] = []
    if not storage and not (query.q or query.user) and query.sort == "start_time" and query.desc:
        return _ledger_page(query, problems)  # the common case, on 10,000 entries: one page read, the rest counted
    if storage:
        rows = _storage_rows(query, storage, endpoint, problems)
        source = storage
    else:
        rows = _ledger_rows(query, problems)
        source = "ledger"
    if query.q:
        rows = [row for row in rows if _matches(row, query.q)]
    if query.sort != "start_time" or not query.desc:
        rows.sort(key=_sort_key(query.sort), reverse=query.desc)
    total = len(rows)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    shown = rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    return RunsPage(shown, total, page, pages, source, problems)


def _ledger_page(query: RunsQuery, problems: list[str]) -> RunsPage:
    """Newest first from the ledger: the runs up to the asked page read (their summaries), the rest counted."""
    from ..runs.memory import ledger

    book = ledger()
    filters: dict[str, Any] = {"job": query.job, "status": query.status, "backend": query.backend,
                               "since": query.since_time()}
    total = book.matching(**filters)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    rows = book.summaries(**filters, limit=page * PAGE_SIZE)[(page - 1) * PAGE_SIZE:]
    problems.extend(book.warnings)
    book.warnings.clear()
    return RunsPage(rows, total, page, pages, "ledger", problems)


def _ledger_rows(query: RunsQuery, problems: list[str]) -> list[dict[str, Any]]:
    """This machine's runs from the ledger's summaries (no record parsed), newest first; a user filter reads the
    records (the summaries do not name the user)."""
    from ..runs.memory import ledger

    book = ledger()
    filters: dict[str, Any] = {"job": query.job, "status": query.status, "backend": query.backend,
                               "since": query.since_time(), "limit": None}
    if query.user:
        rows = [{**record.summary(), "user": record.user, "pipeline": record.pipeline}
                for record in book.query(**filters) if record.user == query.user]
    else:
        rows = book.summaries(**filters)
    problems.extend(book.warnings)
    book.warnings.clear()
    return rows


def _storage_rows(query: RunsQuery, storage: str, endpoint: str | None, problems: list[str]) -> list[dict[str, Any]]:
    from ..runs.listing import RunFilter, storage_rows

    wanted = RunFilter(RunStatus(query.status) if query.status else None, query.job, query.since_time(), 1 << 30)
    found, more = storage_rows(storage, endpoint, wanted, user=query.user, backend=query.backend, compact=False)
    problems.extend(more)
    rows = []
    for row in found:
        if isinstance(row, RunRecord):
            rows.append({**row.summary(), "user": row.user, "pipeline": row.pipeline})
        else:
            rows.append(dict(row))
    return rows


# -- one run ------------------------------------------------------------------------------------------------


@dataclass
class Card:
    """One part of a run's page: its data, or the one line that says why it could not be read."""

    data: Any = None
    error: str | None = None


def card_of(call: Any) -> Card:
    try:
        return Card(call())
    except RtjobError as exc:
        return Card(error=exc.message)
    except (OSError, ValueError) as exc:
        return Card(error=f"could not be read: {exc}")


def find_run(run_id: str, storage: str | None, endpoint: str | None) -> RunRecord | None:
    """The run's record (ledger, else the storage's), with what its run side wrote since when it has not ended."""
    from ..runs.memory import find, with_run_side

    if not run_id or run_id in (".", "..") or any(c in run_id for c in "/\\\x00") or len(run_id) > 256:
        return None  # a run id is one path segment: none leads out of the storage's run folders
    record = find(run_id, storage, endpoint)
    if record is None:
        return None
    if not record.archived:
        record = with_run_side(record)
    return record


@dataclass
class RunView:
    record: RunRecord
    steps: list[dict[str, Any]]
    checkpoints: Card
    metrics: Card
    samples: Card


def run_view(record: RunRecord, storage: str | None, endpoint: str | None) -> RunView:
    steps = []
    for step in record.steps:
        status = "PENDING"
        run_id = step.get("run_id")
        if run_id:
            try:
                found = find_run(str(run_id), storage, endpoint)
                status = found.to_run_info().status.value if found is not None else "PENDING"
            except RtjobError:
                status = "UNKNOWN"
        steps.append({**step, "status": "REUSED" if step.get("reused_from") else status})
    return RunView(record, steps, card_of(lambda: _checkpoints(record)), card_of(lambda: metrics_of(record)),
                   card_of(lambda: samples_of(record)))


def _readable(record: RunRecord) -> bool:
    from ..runs.places import writable_here

    return bool(record.storage_uri) and writable_here(record.backend, record.storage_uri)


def _checkpoints(record: RunRecord) -> list[dict[str, Any]]:
    from ..storage.records import checkpoints

    if not _readable(record):
        return []
    assert record.storage_uri is not None
    return checkpoints(record.storage_uri, record.storage_endpoint)


def metrics_of(record: RunRecord) -> list[dict[str, Any]]:
    """The run's metrics history (one row per epoch); [] when its storage holds none or cannot be read here."""
    from ..storage.layout import NothingStored
    from ..storage.location import parse_location
    from ..storage.results import NoHistory, history_from_location

    if not _readable(record):
        return []
    assert record.storage_uri is not None
    try:
        rows, _where = history_from_location(parse_location(record.storage_uri), record.storage_endpoint)
    except (NoHistory, NothingStored):
        return []
    except BadInput as exc:
        if "no such folder" in exc.message:
            return []
        raise
    return rows


def series(rows: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """The charted metrics: epoch plus every key holding a number in some row (train/val loss, accuracy, samples/s)."""
    from ..storage.results import number

    keys: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key not in keys and number(value) is not None:
                keys.append(key)
    out: dict[str, list[float | None]] = {}
    epochs = [number(row.get("epoch")) for row in rows]
    out["epoch"] = [e if e is not None else float(i + 1) for i, e in enumerate(epochs)]
    for key in keys:
        if key != "epoch":
            out[key] = [number(row.get(key)) for row in rows]
    return out


SAMPLES = "samples"
AUDIO_SUFFIXES = (".wav", ".mp3", ".ogg", ".flac")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
MEDIA_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".wav": "audio/wav", ".mp3": "audio/mpeg", ".ogg": "audio/ogg",
               ".flac": "audio/flac"}
MAX_SAMPLES = 200


def samples_of(record: RunRecord) -> list[dict[str, Any]]:
    """The run's samples (``samples/`` in its folder): name, kind (image, audio, other) and size."""
    from ..storage.opening import objects_for
    from ..storage.stores import is_bookkeeping

    if not _readable(record):
        return []
    assert record.storage_uri is not None
    with objects_for(record.storage_uri, record.storage_endpoint) as objects:
        listed = objects.list(SAMPLES)
    out = []
    for item in listed[:MAX_SAMPLES]:
        name = item.rel[len(SAMPLES) + 1:]
        if is_bookkeeping(name.rsplit("/", 1)[-1]):
            continue
        suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
        kind = "image" if suffix in IMAGE_SUFFIXES else "audio" if suffix in AUDIO_SUFFIXES else "other"
        out.append({"name": name, "kind": kind, "size": item.size})
    return out


def sample_stream(record: RunRecord, name: str) -> tuple[str, Iterator[bytes]]:
    """A sample's media type and bytes, streamed. ``name`` is checked never to leave the run's samples folder."""
    from ..storage.objects import check_key
    from ..storage.opening import objects_for

    if not _readable(record):
        raise BadInput(f"run {record.id}: its storage cannot be read from here")
    rel = check_key(f"{SAMPLES}/{name}")
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    assert record.storage_uri is not None
    objects = objects_for(record.storage_uri, record.storage_endpoint)
    if objects.head(rel) is None:
        objects.close()
        raise BadInput(f"run {record.id}: no sample {name!r}")

    def chunks() -> Iterator[bytes]:
        try:
            yield from objects.stream(rel)
        finally:
            objects.close()

    return MEDIA_TYPES.get(suffix, "application/octet-stream"), chunks()


# -- its log ----------------------------------------------------------------------------------------------


def log_tail(record: RunRecord, lines: int | None = LOG_TAIL_LINES) -> Iterator[str]:
    """The user's view of the run's stored log (runs/logview.py) as text chunks ending at line ends (its last
    ``lines``; None: all of it), streamed."""
    from ..runs.archive import archived_log
    from ..runs.logview import TAIL_SLACK, user_chunks, user_tail

    if lines is None:
        return user_chunks(archived_log(record, None))
    return iter([user_tail(archived_log(record, lines + TAIL_SLACK), lines)])


def log_search(record: RunRecord, needle: str, limit: int = 1000) -> Iterator[tuple[int, str]]:
    """(line number, line) of each line holding ``needle`` (case-insensitive), streamed through the whole log."""
    lowered = needle.lower()
    number = 0
    found = 0
    for chunk in log_tail(record, None):
        for line in chunk.splitlines():
            number += 1
            if lowered in line.lower():
                yield number, line
                found += 1
                if found >= limit:
                    return


class LogFollower:
    """A running run's log as it grows: the parts its companion writes (immutable, cut at line ends), each read
    once, as they appear. ``start`` skips the parts already there (the page shows their tail)."""

    def __init__(self, record: RunRecord) -> None:
        from rtjob_contract import LOG_PART_PREFIX, RUN_LOGS_DIR

        from ..runs.places import log_home

        self.home, self.endpoint = log_home(record)
        attempt = str(record.attempts[-1].get("id")) if record.attempts else record.id
        self.prefix = f"{RUN_LOGS_DIR}/{attempt}"
        self.part_prefix = LOG_PART_PREFIX
        self.seen: set[str] = set()

    def _parts(self) -> list[str]:
        from ..storage.opening import objects_for

        with objects_for(self.home, self.endpoint) as objects:
            return [item.rel for item in objects.list(self.prefix)
                    if item.rel.rsplit("/", 1)[-1].startswith(self.part_prefix)]

    def start(self, skip: int | None = None) -> None:
        """Count the parts there now as read (``skip``: only the first ``skip`` of them: those a tail already showed)."""
        parts = self._parts()
        self.seen.update(parts if skip is None else parts[:skip])

    def count(self) -> int:
        return len(self._parts())

    def new_text(self) -> str:
        """The text of the parts written since the last call ('' if none)."""
        from ..storage.opening import objects_for

        fresh = [rel for rel in self._parts() if rel not in self.seen]
        if not fresh:
            return ""
        out: list[bytes] = []
        with objects_for(self.home, self.endpoint) as objects:
            for rel in fresh:
                out.extend(objects.stream(rel))
                self.seen.add(rel)
        from ..runs.logview import user_text

        return user_text(b"".join(out).decode("utf-8", errors="replace"))  # parts end at line ends


# -- compare ----------------------------------------------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def request_diff(records: list[RunRecord]) -> list[dict[str, Any]]:
    """The runs' requests side by side, flattened to dotted keys: {key, values (one per run), differs}."""
    flats = [_flatten(record.request or {}) for record in records]
    keys: list[str] = []
    for flat in flats:
        keys.extend(key for key in flat if key not in keys)
    rows = []
    for key in keys:
        values = [flat.get(key) for flat in flats]
        rows.append({"key": key, "values": values, "differs": any(v != values[0] for v in values[1:])})
    return rows
