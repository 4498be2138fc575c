"""What `rtjob ui` shows, as plain data: the runs (this machine's ledger, or a team's storage through its index), one
run (its record, steps, checkpoints, metrics, samples, log), a comparison. Calls the use cases in runs/ and
storage/ as the CLI does; reads no wire format itself and never writes to a run's storage (the index listing is
asked not to compact; only this machine's ledger learns the team runs it lists, as `rtjob runs --storage` does).

Everything returned here is still unredacted data: app.py passes it through the redaction boundary."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import BadInput, RtjobError
from ..core.record import RunRecord
from ..runs.view import RunView
from ..storage.run_filter import RunFilter

PAGE_SIZE = 50
LOG_TAIL_LINES = 1000
SORTS = ("start_time", "job", "status", "user", "backend", "cost_usd", "id")
MAX_COMPARE = 5


@dataclass
class RunsQuery:
    """The runs page's query string: which runs (the one run filter: job, status, user, backend, since, q), their
    sort and page (bad values: BadInput)."""

    filter: RunFilter = field(default_factory=RunFilter)
    sort: str = "start_time"
    desc: bool = True
    page: int = 1

    @classmethod
    def parse(cls, params: dict[str, str]) -> RunsQuery:
        wanted = RunFilter.from_params(params)
        sort = (params.get("sort") or "").strip() or "start_time"
        if sort not in SORTS:
            raise BadInput(f"sort {sort!r}: expected one of {', '.join(SORTS)}")
        try:
            page = int((params.get("page") or "").strip() or "1")
        except ValueError:
            raise BadInput("page: expected a whole number") from None
        return cls(wanted, sort=sort, desc=(params.get("order") or "desc").strip() != "asc", page=max(1, page))


@dataclass
class RunsPage:
    rows: list[dict[str, Any]]
    total: int  # runs that match, over every page
    page: int
    pages: int
    source: str  # "ledger" or the storage root listed
    problems: list[str] = field(default_factory=list)


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
    wanted = query.filter
    if not storage and not wanted.needs_rows and query.sort == "start_time" and query.desc:
        return _ledger_page(query, problems)  # the common case, on 10,000 entries: one page read, the rest counted
    if storage:
        rows = _storage_rows(wanted, storage, endpoint, problems)
        source = storage
    else:
        rows = _ledger_rows(wanted, problems)
        source = "ledger"
    if query.sort != "start_time" or not query.desc:
        rows.sort(key=_sort_key(query.sort), reverse=query.desc)
    total = len(rows)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    shown = rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    if not storage:
        shown = _with_records(shown)
    return RunsPage([table_row(row) for row in shown], total, page, pages, source, problems)


def _with_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ledger summaries of one page as table rows from their records (user, tags, args, final metrics)."""
    from ..runs.memory import ledger

    book = ledger()
    out = []
    for row in rows:
        record = None if "user" in row else book.get(str(row.get("id")))
        out.append(record_row(record) if record is not None else row)
    return out


def _ledger_page(query: RunsQuery, problems: list[str]) -> RunsPage:
    """Newest first from the ledger: the runs up to the asked page read (their records: the user, args, tags), the
    rest counted."""
    from ..runs.memory import ledger

    book = ledger()
    filters = query.filter.ledger_query()
    total = book.matching(**filters)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(query.page, pages)
    rows = [record_row(r) for r in book.query(**filters, limit=page * PAGE_SIZE)[(page - 1) * PAGE_SIZE:]]
    problems.extend(book.warnings)
    book.warnings.clear()
    return RunsPage([table_row(row) for row in rows], total, page, pages, "ledger", problems)


def _ledger_rows(wanted: RunFilter, problems: list[str]) -> list[dict[str, Any]]:
    """This machine's runs from the ledger that ``wanted`` keeps, newest first: their summaries (a search matches
    id, job, message), or with a user filter their records (the summaries do not name the user, tags or args)."""
    from ..runs.memory import ledger

    book = ledger()
    filters = {**wanted.ledger_query(), "limit": None}
    if wanted.user:
        rows = [row for row in map(record_row, book.query(**filters)) if wanted.keeps(row)]
    else:  # the summaries (a search over 10,000 runs reads no record); the shown page's records are read after
        rows = [row for row in book.summaries(**filters) if wanted.keeps(row)]
    problems.extend(book.warnings)
    book.warnings.clear()
    return rows


def _storage_rows(wanted: RunFilter, storage: str, endpoint: str | None,
                  problems: list[str]) -> list[dict[str, Any]]:
    from ..runs.history.listing import storage_rows

    found, more = storage_rows(storage, endpoint, wanted, compact=False)
    problems.extend(more)
    rows = []
    for row in found:
        if isinstance(row, RunRecord):
            rows.append(record_row(row))
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


def find_run(run_id: str, storage: str | None, endpoint: str | None) -> RunView | None:
    """The run as `rtjob status` and `rtjob show` tell it, from its records (runs/view.recorded: look's read-only
    variant: a retried run one story, a pipeline from its record; nothing asked of a cluster, nothing written)."""
    from ..runs.view import recorded

    if not run_id or run_id in (".", "..") or any(c in run_id for c in "/\\\x00") or len(run_id) > 256:
        return None  # a run id is one path segment: none leads out of the storage's run folders
    return recorded(run_id, storage, endpoint)


@dataclass
class RunCards:
    """What the run page shows beside its status: its steps (a pipeline's, each as its own run's story) and the
    cards read from its storage."""

    steps: list[dict[str, Any]]
    checkpoints: Card
    metrics: Card
    samples: Card


def run_cards(record: RunRecord, storage: str | None, endpoint: str | None) -> RunCards:
    steps = []
    for step in record.steps:
        status = "PENDING"
        run_id = step.get("run_id")
        if run_id:
            try:
                found = find_run(str(run_id), storage, endpoint)
                status = found.info.status.value if found is not None else "PENDING"
            except RtjobError:
                status = "UNKNOWN"
        steps.append({**step, "status": "REUSED" if step.get("reused_from") else status})
    return RunCards(steps, card_of(lambda: _checkpoints(record)), card_of(lambda: metrics_of(record)),
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
    from ..runs.lifecycle.archive import archived_log
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

    def __init__(self, view: RunView) -> None:
        from rtjob_contract import LOG_PART_PREFIX, RUN_LOGS_DIR

        from ..runs.places import log_home

        assert view.record is not None
        self.home, self.endpoint = log_home(view.record)
        self.prefix = f"{RUN_LOGS_DIR}/{view.latest}"  # its latest attempt's log: the run's log now
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


# -- live rows (metrics.jsonl, system.jsonl) and the live summary --------------------------------------------------

MAX_LIVE_BYTES = 64 * 1024 * 1024


def live_rows(record: RunRecord, name: str, skip: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The run's JSON-lines rows ``name`` (STEP_METRICS_FILE or SYSTEM_METRICS_FILE) after the first ``skip``
    complete lines, and the count of complete lines now. A line still being written (no newline yet) and a line
    that is not a JSON object are left out; absent or unreadable here: ([], 0)."""
    from ..storage.opening import objects_for

    if not _readable(record):
        return [], 0
    assert record.storage_uri is not None
    with objects_for(record.storage_uri, record.storage_endpoint) as objects:
        got = objects.get(name, MAX_LIVE_BYTES)
    if got is None:
        return [], 0
    lines = got.data.split(b"\n")[:-1]  # the last piece has no newline yet: a row still being appended
    rows = []
    for line in lines[skip:]:
        try:
            row = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, len(lines)


def live_summary(view: RunView, steps: list[dict[str, Any]], epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run page's live header shows: the run's story (status, message, exit code, times: as `rtjob status`
    tells them), the attempt, the last step or epoch and its time."""
    info, record = view.info, view.record
    assert record is not None
    last_step = steps[-1] if steps else None
    last_epoch = epochs[-1] if epochs else None
    attempt = record.attempts[-1] if record.attempts else None
    return {
        "id": record.id, "status": info.status.value, "ended": info.status.terminal, "message": info.message,
        "exit_code": info.exit_code, "start_time": info.start_time, "end_time": info.end_time,
        "last_seen": record.last_seen,
        "attempt": (attempt.get("attempt") or len(record.attempts)) if attempt else None,
        "attempts": len(record.attempts),
        "step": last_step.get("step") if last_step else None,
        "step_time": last_step.get("time") if last_step else None,
        "epoch": (last_step or {}).get("epoch", last_epoch.get("epoch") if last_epoch else None),
    }


# -- the log as a terminal shows it (for search results: the page's script renders the log itself) ------------------

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def terminal_line(line: str) -> str:
    """One log line as a terminal leaves it: escape sequences (colours) dropped, a carriage-return-redrawn line
    (a progress bar) reduced to its last state."""
    line = line.rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[1]
    return _ESCAPES.sub("", line)


def marked(line: str, needle: str) -> list[tuple[str, bool]]:
    """``line`` cut into (text, is a match of ``needle``) pieces, case-insensitively."""
    out: list[tuple[str, bool]] = []
    lowered, size, at = line.lower(), len(needle), 0
    while needle:
        found = lowered.find(needle.lower(), at)
        if found < 0:
            break
        if found > at:
            out.append((line[at:found], False))
        out.append((line[found:found + size], True))
        at = found + size
    if at < len(line) or not out:
        out.append((line[at:], False))
    return out


def log_matches(record: RunRecord, needle: str, context: int = 2, limit: int = 200) -> list[list[dict[str, Any]]]:
    """The log's lines holding ``needle`` with ``context`` lines either side, as groups of adjacent lines
    [{n, pieces, match}] (overlapping contexts merged); at most ``limit`` matches."""
    from collections import deque

    groups: list[list[dict[str, Any]]] = []
    before: deque[tuple[int, str]] = deque(maxlen=context)
    after = 0
    found = 0
    number = 0
    lowered = needle.lower()
    current: list[dict[str, Any]] | None = None
    for chunk in log_tail(record, None):
        for raw in chunk.splitlines():
            number += 1
            line = terminal_line(raw)
            if lowered in line.lower() and found < limit:
                found += 1
                first = before[0][0] if before else number
                if current is None or current[-1]["n"] < first - 1:
                    current = []
                    groups.append(current)
                current.extend({"n": n, "pieces": [(t, False)], "match": False} for n, t in before)
                current.append({"n": number, "pieces": marked(line, needle), "match": True})
                before.clear()
                after = context
            elif after > 0 and current is not None:
                current.append({"n": number, "pieces": [(line, False)], "match": False})
                after -= 1
            else:
                before.append((number, line))
        if found >= limit and after <= 0:
            break
    return groups


# -- the runs table's columns ----------------------------------------------------------------------------------

def _recorded_part(record: RunRecord, name: str) -> dict[str, Any]:
    """``args`` or ``tags`` as the run's recorded spec holds them (the job document, then its --set overrides)."""
    spec = record.spec or {}
    document = spec.get("document")
    found = document.get(name) if isinstance(document, dict) else None
    out: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
    sets = (spec.get("overrides") or {}).get("sets") if isinstance(spec.get("overrides"), dict) else None
    for item in sets or []:
        key, eq, value = str(item).partition("=")
        if eq and key.startswith(f"{name}."):
            out[key[len(name) + 1:]] = value
    return out


def record_row(record: RunRecord) -> dict[str, Any]:
    """A record as a runs-table row: its index entry's fields (today's, and attempts, tags, args, final_metrics as
    the index now writes them) read from the record itself."""
    from ..storage.results import number

    last = (record.metrics or {}).get("last") if isinstance(record.metrics, dict) else None
    finals = {k: v for k, v in (last or {}).items() if k != "epoch" and number(v) is not None}
    return {**record.summary(), "user": record.user, "pipeline": record.pipeline, "attempts": len(record.attempts),
            "tags": _recorded_part(record, "tags"), "args": _recorded_part(record, "args"), "final_metrics": finals}


def _seconds(start: Any, end: Any) -> float | None:
    try:
        began = dt.datetime.fromisoformat(str(start))
        ended = dt.datetime.fromisoformat(str(end)) if end else dt.datetime.now(dt.timezone.utc)
    except ValueError:
        return None
    if began.tzinfo is None or ended.tzinfo is None:
        return None
    return max(0.0, (ended - began).total_seconds())


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A listed row with what the table shows filled in: duration (the entry's, else from its times: a run not
    ended counts up to now), tags, args and final metrics as dicts (absent from older entries: empty)."""
    from ..storage.results import number

    out = dict(row)
    started = row.get("start_time") or row.get("submitted_at")
    duration = number(row.get("duration_s"))
    if duration is None and started and (row.get("end_time") or row.get("status") in ("RUNNING", "PENDING")):
        duration = _seconds(started, row.get("end_time"))
    out["duration_s"] = duration
    for name in ("tags", "args", "final_metrics"):
        out[name] = row.get(name) if isinstance(row.get(name), dict) else {}
    out["final_metrics"] = {k: v for k, v in out["final_metrics"].items() if number(v) is not None}
    return out


PREFERRED_METRICS = ("val_loss", "val_accuracy", "train_loss", "loss", "accuracy")
DEFAULT_ARG_COLUMNS = 3


def table_columns(rows: list[dict[str, Any]], chosen: list[str] | None) -> tuple[list[str], list[str], list[str]]:
    """(every column one may choose: "args.X" and "metric.Y", the chosen ones, in that order). Chosen: as asked,
    else the first few args and the preferred final metrics the shown rows hold."""
    args: list[str] = []
    metrics: list[str] = []
    for row in rows:
        args.extend(f"args.{k}" for k in row["args"] if f"args.{k}" not in args)
        metrics.extend(f"metric.{k}" for k in row["final_metrics"] if f"metric.{k}" not in metrics)
    choosable = args + metrics
    if chosen is None:
        preferred = [f"metric.{m}" for m in PREFERRED_METRICS if f"metric.{m}" in metrics][:2]
        return choosable, args[:DEFAULT_ARG_COLUMNS], preferred
    return choosable, [c for c in chosen if c.startswith("args.")], [c for c in chosen if c.startswith("metric.")]


def parse_columns(value: str | None) -> list[str] | None:
    """``cols``: comma-separated "args.X" / "metric.Y" (None: the default choice)."""
    if value is None:
        return None
    cols = [c.strip() for c in value.split(",") if c.strip()]
    for col in cols:
        if not col.startswith(("args.", "metric.")) or len(col) > 200:
            raise BadInput(f"cols {col[:60]!r}: expected args.NAME or metric.NAME, comma-separated")
    return cols


# -- compare: what was asked, without what differs in every run anyway --------------------------------------------

# Keys whose values name the run itself (ids, folders, addresses): shown, never counted as a difference.
_OWN_KEY = re.compile(r"(^|[._])(id|run_id|submission_id|uri|url|path|dir|working_dir|storage|address|"
                      r"endpoint|[A-Z0-9_]*(RUN_ID|_URI|_DIR|_PATH|_ID|JOB_NAME))$", re.IGNORECASE)


def _entrypoint_args(entrypoint: Any) -> dict[str, str]:
    """``--name value`` / ``--name=value`` / a bare ``--flag`` of an entrypoint command, as args."""
    import shlex

    try:
        words = shlex.split(str(entrypoint)) if entrypoint else []
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for n, word in enumerate(words):
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            if not eq:
                following = words[n + 1] if n + 1 < len(words) else None
                value = following if following is not None and not following.startswith("--") else "true"
            out[name] = value
    return out


def compare_rows(records: list[RunRecord], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs side by side: {section, key, values, differs, own}: args (its entrypoint's flags, and the job's
    args over them), tags, env (names and values), shape, then the rest of the request flattened. ``own``: a value
    that names the run itself (ids, paths): never counted as a difference."""
    def args_of(record: RunRecord, entry: dict[str, Any]) -> dict[str, Any]:
        found = entry.get("args") if isinstance(entry.get("args"), dict) else None
        flags = _entrypoint_args((record.request or {}).get("entrypoint"))
        return {**flags, **(found or _recorded_part(record, "args"))}

    def env_of(record: RunRecord) -> dict[str, Any]:
        env = ((record.request or {}).get("runtime_env") or {}).get("env_vars") or {}
        return env if isinstance(env, dict) else {}

    def rest_of(record: RunRecord) -> dict[str, Any]:
        flat = _flatten(record.request or {})
        return {k: v for k, v in flat.items() if not k.startswith("runtime_env.env_vars.")}

    def tags_of(entry: dict[str, Any]) -> dict[str, Any]:
        tags = entry.get("tags")
        return tags if isinstance(tags, dict) else {}

    sections = [("args", [args_of(r, e) for r, e in zip(records, entries, strict=True)]),
                ("tags", [tags_of(e) for e in entries]),
                ("env", [env_of(r) for r in records]),
                ("shape", [dict(r.shape or {}) for r in records]),
                ("request", [rest_of(r) for r in records])]
    rows = []
    for section, dicts in sections:
        flats = [_flatten(d) if d else {} for d in dicts]
        keys: list[str] = []
        for flat in flats:
            keys.extend(key for key in flat if key not in keys and key)
        for key in keys:
            values = [flat.get(key) for flat in flats]
            own = bool(_OWN_KEY.search(key))
            differs = any(v != values[0] for v in values[1:])
            rows.append({"section": section, "key": key, "values": values, "differs": differs and not own,
                         "own": own})
    return rows
