"""What every route shares: the app's configuration and templates (a page rendered through the redaction boundary,
a problem page), the run asked for as `rtjob status` tells it (or 404), the status of a failure (``failed``: 503 while
the storage cannot be read), and streaming helpers."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from ..core.errors import StorageError
from ..core.model import stamp
from ..core.record import RunRecord
from ..core.redact import redact
from ..core.verdict import run_seconds
from ..runs.view import RunView
from . import run_page
from .formats import ago, duration, earlier_attempts, end_words, num, short, timeline_bar
from .safety import Config, clean_data, finalize

HERE = Path(__file__).parent
LIVE_POLL_S = 1.0


class NotFound(Exception):
    pass


def failed(exc: BaseException, default: int = 400) -> int:
    """The HTTP status of a failed answer: 503 while the storage cannot be read (a StorageError: a fault that may pass,
    once a reader's patience is spent, or a permanent one: no bucket, denied, no credentials), 404 for a run nothing
    knows, else ``default``. Its one line is rtjob's, through the redaction boundary (safety.clean)."""
    if isinstance(exc, StorageError):
        return 503
    if isinstance(exc, NotFound):
        return 404
    return default


class Site:
    """The app's configuration and templates, and what every route asks of them."""

    def __init__(self, config: Config) -> None:
        self.config = config
        env = Environment(loader=FileSystemLoader(str(HERE / "templates")),
                          autoescape=select_autoescape(default=True), finalize=finalize)
        env.filters["urlpart"] = lambda value: quote(str(value), safe="")
        env.filters["jsonattr"] = lambda value: json.dumps(clean_data(value), separators=(",", ":"))
        env.filters["ago"] = ago
        env.filters["duration"] = duration
        env.filters["run_seconds"] = run_seconds  # how long a run ran, by the verdict's rule (None: not known)
        env.filters["short"] = short
        env.filters["num"] = num
        env.filters["stamp"] = stamp  # a time as every view prints it: UTC to the second, with a Z
        env.filters["end_words"] = end_words
        env.filters["timeline_bar"] = timeline_bar  # the start-up timeline drawn as one horizontal bar
        env.filters["earlier_attempts"] = earlier_attempts
        self.env = env

    def page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(storage=self.config.storage, **context)
        return HTMLResponse(redact(html), status_code=status_code)

    def problem(self, message: str, status_code: int = 400) -> HTMLResponse:
        return self.page("error.html", status_code=status_code, message=message)

    def view_or_404(self, request: Request) -> tuple[RunView, RunRecord]:
        """The run as `rtjob status` tells it (run_page.find_run) and the record that told it, or NotFound."""
        run_id = request.path_params["run_id"]
        view = run_page.find_run(run_id, self.config.lookup_root, self.config.endpoint)
        if view is None or view.record is None:
            raise NotFound(f"no run {run_id!r} in the ledger or the storage")
        return view, view.record

    def record_or_404(self, request: Request) -> RunRecord:
        return self.view_or_404(request)[1]


def site_of(request: Request) -> Site:
    """The app's Site (app.create_app keeps it in the app's state)."""
    site: Site = request.app.state.site
    return site


async def favicon(request: Request) -> Response:
    return Response((HERE / "static" / "favicon.svg").read_bytes(), media_type="image/svg+xml",
                    headers={"cache-control": "max-age=86400"})


def count(value: str) -> int | None:
    """A query's whole number of at most 9 digits (rows shown, lines of context); None: not one."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


def file_name(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:120] or "run"


def source(request: Request, config: Config) -> str | None:
    """The storage root the runs page lists (None: the ledger): the team's by default when one is configured."""
    if config.storage and request.query_params.get("source", "storage") == "storage":
        return config.storage
    return None


def text_stream(chunks: Iterator[str], parts: int = 0) -> StreamingResponse:
    return StreamingResponse(threaded(chunk.encode() for chunk in chunks), media_type="text/plain; charset=utf-8",
                             headers={"cache-control": "no-store", "x-log-parts": str(parts)})


async def threaded(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A blocking iterator (storage reads) driven from a worker thread, one chunk at a time."""
    done = object()
    while True:
        chunk = await asyncio.to_thread(next, chunks, done)
        if chunk is done:
            return
        assert isinstance(chunk, bytes)
        yield chunk
