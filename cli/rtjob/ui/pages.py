"""The app's HTML pages: the runs table, a run's page and its status card, a log search, a comparison, the login
form. Each answers from the modules that say what it shows (runs_page, run_page, logs, compare); every value a
template prints passes the redaction boundary (site.py, safety.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..core import clock
from ..core.errors import RtjobError
from . import logs, run_page, runs_page, table
from .compare import MAX_COMPARE, compare_rows
from .formats import charts, overlaid
from .safety import TOKEN_COOKIE, clean
from .site import NotFound, count, failed, favicon, site_of, source


async def runs(request: Request) -> Response:
    site = site_of(request)
    if request.query_params.get("colsform"):  # the columns form: its ticks as one cols=a,b in the URL
        kept = [(k, v) for k, v in request.query_params.multi_items() if k not in ("c", "colsform", "cols")]
        chosen = ",".join(request.query_params.getlist("c"))
        return RedirectResponse("/?" + urlencode([*kept, ("cols", chosen)]), status_code=303)
    try:
        query = runs_page.RunsQuery.parse(dict(request.query_params))
        asked = table.parse_columns(request.query_params.get("cols"))
        listed = await asyncio.to_thread(runs_page.runs_page, query, source(request, site.config), site.config.endpoint)
    except RtjobError as exc:
        return site.problem(exc.message, failed(exc))
    choosable, arg_cols, metric_cols = table.table_columns(listed.rows, asked)
    return site.page("runs.html", listed=listed, query=query, params=dict(request.query_params),
                     choosable=choosable, arg_cols=arg_cols, metric_cols=metric_cols, now=clock.now_iso("seconds"),
                     source=request.query_params.get("source", "storage" if site.config.storage else "ledger"))


async def run(request: Request) -> Response:
    site = site_of(request)
    try:
        story, record = await asyncio.to_thread(site.view_or_404, request)
        view = await asyncio.to_thread(run_page.run_cards, record, site.config.lookup_root, site.config.endpoint)
    except NotFound as exc:
        return site.problem(str(exc), 404)
    except RtjobError as exc:
        return site.problem(exc.message, failed(exc))
    return site.page("run.html", view=view, record=record, info=story.info, charts=charts(view.metrics.data),
                     request_json=json.dumps(record.request, indent=2, ensure_ascii=False) if record.request else None)


async def run_card(request: Request) -> Response:
    site = site_of(request)
    try:
        story, record = await asyncio.to_thread(site.view_or_404, request)
    except (NotFound, RtjobError) as exc:
        return PlainTextResponse(clean(str(exc)), status_code=failed(exc, 404))
    info = story.info
    response = site.page("status_card.html", record=record, info=info)
    response.headers["x-run-ended"] = "1" if info.status.terminal else "0"
    return response


async def log_find(request: Request) -> Response:
    """Search inside the app: the matching lines highlighted, with their context, each a link to the run."""
    site = site_of(request)
    needle = request.query_params.get("q", "")
    if not needle or len(needle) > 500:
        return site.problem("q: what to search for (1 to 500 characters)")
    context = count(request.query_params.get("context", "2"))
    if context is None or context > 20:
        return site.problem("context: lines around each match, 0 to 20")
    try:
        record = await asyncio.to_thread(site.record_or_404, request)
        groups = await asyncio.to_thread(logs.log_matches, record, needle, context)
    except NotFound as exc:
        return site.problem(str(exc), 404)
    except RtjobError as exc:
        return site.problem(f"the log is not readable: {exc.message}", failed(exc, 404))
    return site.page("log_find.html", record=record, needle=needle, groups=groups, context=context,
                     matches=sum(1 for g in groups for line in g if line["match"]))


async def compare(request: Request) -> Response:
    site = site_of(request)
    ids = [i for i in request.query_params.getlist("run") if i]
    if not 2 <= len(ids) <= MAX_COMPARE:
        return site.problem(f"compare: choose 2 to {MAX_COMPARE} runs (got {len(ids)})")

    def gather() -> list[tuple[Any, run_page.Card]]:
        out = []
        for run_id in ids:
            found = run_page.find_run(run_id, site.config.lookup_root, site.config.endpoint)
            if found is None or found.record is None:
                raise NotFound(f"no run {run_id!r} in the ledger or the storage")
            record = found.record  # shown with the verdict's status (`status`'s), not the record's own
            shown = dataclasses.replace(record, status=found.info.status.value)
            out.append((shown, run_page.card_of(lambda r=record: run_page.metrics_of(r))))
        return out
    runs_found, problem = await _gathered(site, gather)
    if problem is not None:
        return problem
    return site.page("compare.html", runs=runs_found, diff=compare_rows([r for r, _ in runs_found]),
                     charts=overlaid([(r.id, card.data or []) for r, card in runs_found]))


async def queue(request: Request) -> Response:
    """A team's queue: its admitted and queued runs in order, as `rtjob queue NAME` lists them. Its storage is the
    one a known run's record names (``run``), else the app's: never a location taken from the URL."""
    from ..runs.queued import queue_at

    site = site_of(request)
    name, run_id = request.path_params["name"], request.query_params.get("run")

    def gather() -> Any:
        storage = site.config.storage or site.config.lookup_root
        found = run_page.find_run(run_id, site.config.lookup_root, site.config.endpoint) if run_id else None
        recorded = (found.record.queue or {}) if found is not None and found.record is not None else {}
        if recorded.get("name") == name and recorded.get("storage"):
            storage = str(recorded["storage"])
        if not storage:
            raise NotFound(f"queue {name!r}: no storage to read it from (rtjob ui --storage, or a run of it: ?run=ID)")
        return queue_at(name, storage, site.config.endpoint)
    listed, problem = await _gathered(site, gather)
    if problem is not None:
        return problem
    return site.page("queue.html", view=listed.view, rows=listed.rows())


async def _gathered(site: Any, gather: Any) -> tuple[Any, Response | None]:
    """What ``gather`` found (in a thread), or the page that says why not: 404 for what does not exist."""
    try:
        return await asyncio.to_thread(gather), None
    except NotFound as exc:
        return None, site.problem(str(exc), 404)
    except RtjobError as exc:
        return None, site.problem(exc.message, failed(exc))


async def login(request: Request) -> Response:
    site = site_of(request)
    if request.method == "POST":
        body = (await request.body())[:4096].decode("utf-8", "replace")
        given = (parse_qs(body).get("token") or [""])[0]
        if site.config.token is not None and hmac.compare_digest(given.encode(), site.config.token.encode()):
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
            return response
        return site.page("login.html", status_code=401, wrong=True)
    return site.page("login.html", wrong=False)


ROUTES: list[BaseRoute] = [
    Route("/", runs), Route("/runs/{run_id}", run), Route("/runs/{run_id}/card", run_card),
    Route("/runs/{run_id}/log/find", log_find), Route("/compare", compare), Route("/queues/{name}", queue),
    Route("/login", login, methods=["GET", "POST"]), Route("/favicon.ico", favicon)]
