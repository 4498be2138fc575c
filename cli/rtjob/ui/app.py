"""`rtjob ui`'s web app: Starlette routes over queries.py, server-rendered Jinja templates, one small script.

Safety, in one place: every request's Host header is checked (DNS rebinding); off loopback a token is required
(header X-Rtjob-Token or the cookie /login sets; never in a URL); every value a template prints, every JSON answer
and every log line passes the redaction boundary (core/redact.py) and has bidi controls made visible; templates
autoescape; a sample's name cannot leave the run's samples folder; a card that cannot be read says so in one line.
Read-only: no route changes a run or writes to its storage."""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import AsyncIterator, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core.errors import RtjobError
from ..core.record import RunRecord
from ..core.redact import redact, redact_data
from ..runs.view import RunView
from . import queries

HERE = Path(__file__).parent
TOKEN_HEADER = "x-rtjob-token"
TOKEN_COOKIE = "rtjob_ui_token"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD = ("0.0.0.0", "::")  # every interface: any Host name reaches it, and the token guards every request
LIVE_POLL_S = 1.0
# Bidi controls and isolates (they reorder what a reader sees: "Trojan Source"), shown as their code points.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "media-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def clean(text: str) -> str:
    """Text as shown: redacted, with bidi controls made visible (<U+202E>)."""
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", redact(text))


def clean_data(value: Any) -> Any:
    value = redact_data(value, ())
    if isinstance(value, str):
        return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", value)
    if isinstance(value, list):
        return [clean_data(item) for item in value]
    if isinstance(value, dict):
        return {clean_data(k): clean_data(v) for k, v in value.items()}
    return value


def _finalize(value: Any) -> Any:
    """Every {{ value }} a template prints passes here before it is escaped."""
    if isinstance(value, Markup):  # tojson and the like: already escaped markup, redacted as text
        return Markup(_BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", redact(str(value))))
    if isinstance(value, str):
        return clean(value)
    return value


@dataclass
class Config:
    storage: str | None  # the team's storage root listed on the runs page (None: this machine's ledger)
    lookup_root: str | None  # where a run's record is looked for beyond the ledger
    endpoint: str | None
    host: str
    port: int
    token: str | None  # required off loopback


class Guard:
    """Host header check on every request, and the token when one is set (pure ASGI: streaming stays streaming)."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.config = config

    def _allowed_host(self, value: str) -> bool:
        host, _, port = value.rpartition(":") if not value.endswith("]") else (value, "", "")
        if not host:
            host, port = value, ""
        host = host.strip("[]").lower()
        port = port or "80"  # a browser leaves the default port out
        if port != str(self.config.port) or not host:
            return False
        if self.config.host in WILDCARD:
            return self.config.token is not None
        names = {*LOOPBACK} if self.config.host in LOOPBACK else {self.config.host.lower()}
        return host in names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self._allowed_host(headers.get("host", "")):
            await PlainTextResponse("bad Host header", status_code=421)(scope, receive, send)
            return
        token = self.config.token
        if token is not None and scope["path"] not in ("/login",) and not scope["path"].startswith("/static/"):
            given = headers.get(TOKEN_HEADER) or _cookie(headers.get("cookie", ""), TOKEN_COOKIE) or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                if scope["method"] == "GET" and "text/html" in headers.get("accept", ""):
                    await RedirectResponse("/login", status_code=303)(scope, receive, send)
                else:
                    await PlainTextResponse("a token is required (header X-Rtjob-Token)",
                                            status_code=401)(scope, receive, send)
                return

        async def secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (b"content-security-policy", CSP.encode()),
                                      (b"x-content-type-options", b"nosniff"),
                                      (b"referrer-policy", b"no-referrer"),
                                      (b"x-frame-options", b"DENY")]
            await send(message)

        await self.app(scope, receive, secured)


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def create_app(config: Config) -> ASGIApp:
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(default=True),
                      finalize=_finalize)
    env.filters["urlpart"] = lambda value: quote(str(value), safe="")
    env.filters["jsonattr"] = lambda value: json.dumps(clean_data(value), separators=(",", ":"))
    env.filters["ago"] = _ago
    env.filters["duration"] = _duration
    env.filters["short"] = _short
    env.filters["num"] = _num

    def page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(storage=config.storage, **context)
        return HTMLResponse(redact(html), status_code=status_code)

    def problem(message: str, status_code: int = 400) -> HTMLResponse:
        return page("error.html", status_code=status_code, message=message)

    def view_or_404(request: Request) -> tuple[RunView, RunRecord]:
        """The run as `rtjob status` tells it (queries.find_run) and the record that told it, or _NotFound."""
        view = queries.find_run(request.path_params["run_id"], config.lookup_root, config.endpoint)
        if view is None or view.record is None:
            raise _NotFound(f"no run {request.path_params['run_id']!r} in the ledger or the storage")
        return view, view.record

    def record_or_404(request: Request) -> RunRecord:
        return view_or_404(request)[1]

    async def runs(request: Request) -> Response:
        if request.query_params.get("colsform"):  # the columns form: its ticks as one cols=a,b in the URL
            kept = [(k, v) for k, v in request.query_params.multi_items() if k not in ("c", "colsform", "cols")]
            chosen = ",".join(request.query_params.getlist("c"))
            return RedirectResponse("/?" + urlencode([*kept, ("cols", chosen)]), status_code=303)
        try:
            query = queries.RunsQuery.parse(dict(request.query_params))
            asked = queries.parse_columns(request.query_params.get("cols"))
            listed = await asyncio.to_thread(queries.runs_page, query, _source(request, config), config.endpoint)
        except RtjobError as exc:
            return problem(exc.message)
        choosable, arg_cols, metric_cols = queries.table_columns(listed.rows, asked)
        return page("runs.html", listed=listed, query=query, params=dict(request.query_params),
                    choosable=choosable, arg_cols=arg_cols, metric_cols=metric_cols, now=_now(),
                    source=request.query_params.get("source", "storage" if config.storage else "ledger"))

    async def runs_json(request: Request) -> Response:
        try:
            query = queries.RunsQuery.parse(dict(request.query_params))
            listed = await asyncio.to_thread(queries.runs_page, query, _source(request, config), config.endpoint)
        except RtjobError as exc:
            return JSONResponse({"error": clean(exc.message)}, status_code=400)
        return JSONResponse(clean_data({"runs": listed.rows, "total": listed.total, "page": listed.page,
                                        "pages": listed.pages, "problems": listed.problems}))

    async def run(request: Request) -> Response:
        try:
            story, record = await asyncio.to_thread(view_or_404, request)
            view = await asyncio.to_thread(queries.run_cards, record, config.lookup_root, config.endpoint)
        except _NotFound as exc:
            return problem(str(exc), 404)
        except RtjobError as exc:
            return problem(exc.message)
        return page("run.html", view=view, record=record, info=story.info, charts=_charts(view.metrics.data),
                    request_json=json.dumps(record.request, indent=2, ensure_ascii=False) if record.request else None)

    async def run_card(request: Request) -> Response:
        try:
            story, record = await asyncio.to_thread(view_or_404, request)
        except (_NotFound, RtjobError) as exc:
            return PlainTextResponse(clean(str(exc)), status_code=404)
        info = story.info
        response = page("status_card.html", record=record, info=info)
        response.headers["x-run-ended"] = "1" if info.status.terminal else "0"
        return response

    async def run_json(request: Request) -> Response:
        """The run's record, its status, message, exit code and times as the run's story (`rtjob status`)."""
        try:
            story, record = await asyncio.to_thread(view_or_404, request)
        except (_NotFound, RtjobError) as exc:
            return JSONResponse({"error": clean(str(exc))}, status_code=404)
        info = story.info
        told = {"status": info.status.value, "message": info.message, "exit_code": info.exit_code,
                "start_time": info.start_time, "end_time": info.end_time}
        return JSONResponse(clean_data({**record.to_json(), **told}))

    async def run_live(request: Request) -> Response:
        """The run page's poll (about every second while the run is not ended): its status, attempt, last step or
        epoch and its time, the epoch rows, and the step and system rows after the ?steps=N / ?system=M already
        shown."""
        steps_shown = _count(request.query_params.get("steps", "0"), "steps")
        system_shown = _count(request.query_params.get("system", "0"), "system")
        if steps_shown is None or system_shown is None:
            return JSONResponse({"error": "steps, system: expected whole numbers (rows already shown)"},
                                status_code=400)
        try:
            story, record = await asyncio.to_thread(view_or_404, request)
        except (_NotFound, RtjobError) as exc:
            return JSONResponse({"error": clean(str(exc))}, status_code=404)
        from rtjob_contract import STEP_METRICS_FILE, SYSTEM_METRICS_FILE

        def gather() -> dict[str, Any]:
            steps = queries.card_of(lambda: queries.live_rows(record, STEP_METRICS_FILE, steps_shown))
            system = queries.card_of(lambda: queries.live_rows(record, SYSTEM_METRICS_FILE, system_shown))
            epochs = queries.card_of(lambda: queries.metrics_of(record))
            step_rows, steps_n = steps.data or ([], steps_shown)
            system_rows, system_n = system.data or ([], system_shown)
            return {**queries.live_summary(story, step_rows, epochs.data or []),
                    "epoch_charts": _charts(epochs.data), "steps": step_rows, "steps_n": steps_n,
                    "system": system_rows, "system_n": system_n,
                    "problems": [c.error for c in (steps, system, epochs) if c.error]}
        return JSONResponse(clean_data(await asyncio.to_thread(gather)), headers={"cache-control": "no-store"})

    async def log_find(request: Request) -> Response:
        """Search inside the app: the matching lines highlighted, with their context, each a link to the run."""
        needle = request.query_params.get("q", "")
        if not needle or len(needle) > 500:
            return problem("q: what to search for (1 to 500 characters)")
        context = _count(request.query_params.get("context", "2"), "context")
        if context is None or context > 20:
            return problem("context: lines around each match, 0 to 20")
        try:
            record = await asyncio.to_thread(record_or_404, request)
            groups = await asyncio.to_thread(queries.log_matches, record, needle, context)
        except _NotFound as exc:
            return problem(str(exc), 404)
        except RtjobError as exc:
            return problem(f"the log is not readable: {exc.message}", 404)
        return page("log_find.html", record=record, needle=needle, groups=groups, context=context,
                    matches=sum(1 for g in groups for line in g if line["match"]))

    async def log(request: Request) -> Response:
        """The log's last 1,000 lines (?lines=N: the last N, scrolling back; ?all=1: all of it), streamed. Header x-log-parts: the parts it was read from, for
        the live stream to start after them."""
        try:
            story, record = await asyncio.to_thread(view_or_404, request)
        except (_NotFound, RtjobError) as exc:
            return PlainTextResponse(clean(str(exc)), status_code=404)
        going = not story.info.status.terminal
        whole = request.query_params.get("all") == "1"
        asked = request.query_params.get("lines", "")
        lines = _count(asked, "lines") or queries.LOG_TAIL_LINES
        parts = 0
        try:
            if going:
                parts = await asyncio.to_thread(queries.LogFollower(story).count)
            chunks = await asyncio.to_thread(queries.log_tail, record, None if whole else lines)
        except RtjobError as exc:
            if going:  # a run whose companion has written no part yet
                return _text_stream(iter(()), parts=parts)
            return PlainTextResponse(clean(exc.message), status_code=404)
        response = _text_stream((clean(chunk) for chunk in chunks), parts=parts)
        if whole and request.query_params.get("download") == "1":
            response.headers["content-disposition"] = f'attachment; filename="{_file_name(record.id)}.log"'
        return response

    async def log_search(request: Request) -> Response:
        needle = request.query_params.get("q", "")
        if not needle:
            return PlainTextResponse("q: what to search for", status_code=400)
        try:
            record = await asyncio.to_thread(record_or_404, request)
        except (_NotFound, RtjobError) as exc:
            return PlainTextResponse(clean(str(exc)), status_code=404)

        def matches() -> Iterator[str]:
            try:
                for number, line in queries.log_search(record, needle):
                    yield clean(f"{number}: {line}\n")
            except RtjobError as exc:
                yield clean(f"(log not readable: {exc.message})\n")
        return _text_stream(matches())

    async def log_live(request: Request) -> Response:
        try:
            story, _record = await asyncio.to_thread(view_or_404, request)
            follower = queries.LogFollower(story)
            skip = request.query_params.get("skip", "")
            await asyncio.to_thread(follower.start, _count(skip, "skip"))
        except (_NotFound, RtjobError) as exc:
            return PlainTextResponse(clean(str(exc)), status_code=404)

        async def events() -> AsyncIterator[str]:
            yield "retry: 2000\n\n"
            idle = 0
            while not await request.is_disconnected():
                try:
                    text = await asyncio.to_thread(follower.new_text)
                except RtjobError:
                    text = ""
                if text:
                    data = "\n".join(f"data: {line}" for line in clean(text).rstrip("\n").split("\n"))
                    yield f"event: lines\n{data}\n\n"
                    idle = 0
                else:
                    idle += 1
                    if idle % 15 == 0:
                        yield ": still here\n\n"
                        fresh = await asyncio.to_thread(queries.find_run, story.info.id, config.lookup_root,
                                                        config.endpoint)
                        if fresh is not None and fresh.info.status.terminal:
                            yield "event: ended\ndata: ended\n\n"
                            return
                await asyncio.sleep(LIVE_POLL_S)
        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})

    async def sample(request: Request) -> Response:
        try:
            record = await asyncio.to_thread(record_or_404, request)
            media, chunks = await asyncio.to_thread(queries.sample_stream, record, request.path_params["name"])
        except (_NotFound, RtjobError) as exc:
            return PlainTextResponse(clean(str(exc)), status_code=404)
        return StreamingResponse(_threaded(chunks), media_type=media)

    async def compare(request: Request) -> Response:
        ids = [i for i in request.query_params.getlist("run") if i]
        if not 2 <= len(ids) <= queries.MAX_COMPARE:
            return problem(f"compare: choose 2 to {queries.MAX_COMPARE} runs (got {len(ids)})")

        def gather() -> list[tuple[Any, queries.Card]]:
            out = []
            for run_id in ids:
                found = queries.find_run(run_id, config.lookup_root, config.endpoint)
                if found is None or found.record is None:
                    raise _NotFound(f"no run {run_id!r} in the ledger or the storage")
                record = found.record
                out.append((record, queries.card_of(lambda r=record: queries.metrics_of(r))))
            return out
        try:
            runs_found = await asyncio.to_thread(gather)
        except _NotFound as exc:
            return problem(str(exc), 404)
        except RtjobError as exc:
            return problem(exc.message)
        records = [r for r, _ in runs_found]
        entries = [queries.record_row(r) for r in records]
        return page("compare.html", runs=runs_found, diff=queries.compare_rows(records, entries),
                    charts=_overlaid([(r.id, card.data or []) for r, card in runs_found]))

    async def login(request: Request) -> Response:
        if request.method == "POST":
            body = (await request.body())[:4096].decode("utf-8", "replace")
            given = (parse_qs(body).get("token") or [""])[0]
            if config.token is not None and hmac.compare_digest(given.encode(), config.token.encode()):
                response = RedirectResponse("/", status_code=303)
                response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
                return response
            return page("login.html", status_code=401, wrong=True)
        return page("login.html", wrong=False)

    routes = [
        Route("/", runs),
        Route("/api/runs", runs_json),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/card", run_card),
        Route("/api/runs/{run_id}/live", run_live),
        Route("/runs/{run_id}/log/find", log_find),
        Route("/favicon.ico", favicon),
        Route("/api/runs/{run_id}", run_json),
        Route("/runs/{run_id}/log", log),
        Route("/runs/{run_id}/log/search", log_search),
        Route("/runs/{run_id}/log/live", log_live),
        Route("/runs/{run_id}/samples/{name:path}", sample),
        Route("/compare", compare),
        Route("/login", login, methods=["GET", "POST"]),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Guard(Starlette(routes=routes), config)


class _NotFound(Exception):
    pass


async def favicon(request: Request) -> Response:
    return Response((HERE / "static" / "favicon.svg").read_bytes(), media_type="image/svg+xml",
                    headers={"cache-control": "max-age=86400"})


def _count(value: str, name: str) -> int | None:
    """A query's whole number of at most 9 digits (rows shown, lines of context); None: not one."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


def _file_name(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:120] or "run"


def _ago(when: Any) -> str:
    """An ISO time as "5 min ago" (the page shows the absolute one on hover)."""
    import datetime as dt

    try:
        then = dt.datetime.fromisoformat(str(when))
    except ValueError:
        return str(when or "")
    if then.tzinfo is None:
        return str(when)
    seconds = (dt.datetime.now(dt.timezone.utc) - then).total_seconds()
    if seconds < 0:
        return "just now"
    for size, unit in ((86400 * 365, "y"), (86400 * 30, "mo"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return ""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _short(value: Any, size: int = 60) -> str:
    text = str(value)
    return text if len(text) <= size else text[:size - 1] + "…"


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _source(request: Request, config: Config) -> str | None:
    """The storage root the runs page lists (None: the ledger): the team's by default when one is configured."""
    if config.storage and request.query_params.get("source", "storage") == "storage":
        return config.storage
    return None


def _text_stream(chunks: Iterator[str], parts: int = 0) -> StreamingResponse:
    return StreamingResponse(_threaded(chunk.encode() for chunk in chunks), media_type="text/plain; charset=utf-8",
                             headers={"cache-control": "no-store", "x-log-parts": str(parts)})


async def _threaded(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking iterator (storage reads) driven from a worker thread, one chunk at a time."""
    done = object()
    while True:
        chunk = await asyncio.to_thread(next, chunks, done)
        if chunk is done:
            return
        assert isinstance(chunk, bytes)
        yield chunk


CHART_GROUPS = (("loss", ("loss",)), ("accuracy", ("acc",)), ("samples/s", ("samples_per_s", "throughput")))
# Bookkeeping a training loop reports beside its metrics (sizes, times, memory): not charted.
NOT_CHARTED = ("_samples", "_time_s", "_mem_mb", "_bytes")


def _grouped(keys: list[str]) -> list[tuple[str, list[str]]]:
    groups: list[tuple[str, list[str]]] = []
    taken: set[str] = set()
    for title, words in CHART_GROUPS:
        chosen = [k for k in keys if k not in taken and any(w in k for w in words)]
        if chosen:
            groups.append((title, chosen))
            taken.update(chosen)
    groups += [(k, [k]) for k in keys if k not in taken]
    return groups


def _charts(rows: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A run's charts: {title, x (epochs), series [{label, values}]}: the page carries the points as data."""
    if not rows:
        return []
    data = queries.series(rows)
    xs = data.pop("epoch")
    keys = [k for k in data if not k.endswith(NOT_CHARTED)]
    return [{"title": title, "x": xs, "series": [{"label": k, "values": data[k]} for k in chosen]}
            for title, chosen in _grouped(keys)]


def _overlaid(runs: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The compared runs' curves on shared epochs: one chart per metric, a series per run, labelled by the run's
    number on the page (the page's key says which run: legends stay short)."""
    per_run = [(str(n), queries.series(rows)) for n, (_, rows) in enumerate(runs, 1) if rows]
    if not per_run:
        return []
    xs = sorted({x for _, data in per_run for x in data["epoch"] if x is not None})
    keys: list[str] = []
    for _, data in per_run:
        keys.extend(k for k in data if k not in keys and k != "epoch" and not k.endswith(NOT_CHARTED))
    charts = []
    for key in keys:
        series = []
        for run_id, data in per_run:
            if key in data:
                at = dict(zip(data["epoch"], data[key], strict=True))
                series.append({"label": f"run {run_id}", "values": [at.get(x) for x in xs]})
        charts.append({"title": key, "x": xs, "series": series})
    return charts
