"""The app's JSON and streams: the runs as JSON, a run's record and its live poll (its story as `rtjob status`
tells it, the rows its training wrote since the last poll), its log (a tail, the whole, a search, and new lines as
Server-Sent Events while it runs) and its samples. Every answer passes the redaction boundary (safety.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from ..core.end_words import end_line
from ..core.errors import RtjobError
from ..core.model import stamp
from ..core.record import RunRecord
from . import logs, run_page, runs_page
from .formats import charts
from .safety import clean, clean_data
from .site import LIVE_POLL_S, NotFound, count, failed, file_name, site_of, source, text_stream, threaded


async def runs_json(request: Request) -> Response:
    site = site_of(request)
    try:
        query = runs_page.RunsQuery.parse(dict(request.query_params))
        listed = await asyncio.to_thread(runs_page.runs_page, query, source(request, site.config), site.config.endpoint)
    except RtjobError as exc:
        return JSONResponse({"error": clean(exc.message)}, status_code=failed(exc))
    return JSONResponse(clean_data({"runs": [api_times(row) for row in listed.rows], "total": listed.total,
                                    "page": listed.page,
                                    "pages": listed.pages, "problems": listed.problems}))


async def run_json(request: Request) -> Response:
    """The run's record, its status, message, exit code and times as the run's story (`rtjob status`)."""
    site = site_of(request)
    try:
        story, record = await asyncio.to_thread(site.view_or_404, request)
    except (NotFound, RtjobError) as exc:
        return JSONResponse({"error": clean(str(exc))}, status_code=failed(exc, 404))
    info = story.info
    from ..core.verdict import of_record, said

    told = {"status": info.status.value, "message": end_line(info.message, info.status.value),
            "exit_code": info.exit_code, "start_time": info.start_time, "end_time": info.end_time}
    # the run's verdict (a pipeline's: from its steps' records, as the page's story has it)
    verdict = api_times(said(info) if record.steps else of_record(record).to_json())
    return JSONResponse(clean_data({**api_times({**record.to_json(), **told}), "verdict": verdict}))


# The API's times, as every view prints one (UTC to the second, with a Z): the record's own keys and the story's.
TIME_KEYS = ("start_time", "end_time", "submitted_at", "last_seen", "updated_at", "created_at")


def api_times(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its times (TIME_KEYS, the timeline's stages and each attempt's) in the one format; None stays
    None."""
    out = {k: (stamp(v) if v else v) if k in TIME_KEYS and isinstance(v, str) else v for k, v in data.items()}
    timeline = out.get("timeline")
    if isinstance(timeline, dict):
        out["timeline"] = {stage: stamp(when) for stage, when in timeline.items()}
    timelines = out.get("timelines")
    if isinstance(timelines, dict):
        out["timelines"] = {attempt: {stage: stamp(when) for stage, when in stages.items()}
                            for attempt, stages in timelines.items() if isinstance(stages, dict)}
    return out


def last_step(record: RunRecord, rows: list[dict[str, Any]], shown: int) -> list[dict[str, Any]]:
    """The rows the live card's step comes from: the new ones, else the last row already shown (the card says
    the run's last step whatever ?steps=N the page asked after)."""
    from rtjob_contract import STEP_METRICS_FILE

    if rows or shown <= 0:
        return rows
    return run_page.live_rows(record, STEP_METRICS_FILE, shown - 1)[0][-1:]


async def run_live(request: Request) -> Response:
    """The run page's poll (about every second while the run is not ended): its status, attempt, last step or
    epoch and its time, the epoch rows, and the step and system rows after the ?steps=N / ?system=M already
    shown."""
    site = site_of(request)
    steps_shown = count(request.query_params.get("steps", "0"))
    system_shown = count(request.query_params.get("system", "0"))
    if steps_shown is None or system_shown is None:
        return JSONResponse({"error": "steps, system: expected whole numbers (rows already shown)"},
                            status_code=400)
    try:
        story, record = await asyncio.to_thread(site.view_or_404, request)
    except (NotFound, RtjobError) as exc:
        return JSONResponse({"error": clean(str(exc))}, status_code=failed(exc, 404))
    from rtjob_contract import STEP_METRICS_FILE, SYSTEM_METRICS_FILE

    def gather() -> dict[str, Any]:
        steps = run_page.card_of(lambda: run_page.live_rows(record, STEP_METRICS_FILE, steps_shown))
        system = run_page.card_of(lambda: run_page.live_rows(record, SYSTEM_METRICS_FILE, system_shown))
        epochs = run_page.card_of(lambda: run_page.metrics_of(record))
        step_rows, steps_n = steps.data or ([], steps_shown)
        system_rows, system_n = system.data or ([], system_shown)
        summary = run_page.live_summary(story, last_step(record, step_rows, steps_n), epochs.data or [])
        summary["message"] = end_line(summary.get("message"), summary.get("status"))
        return {**api_times(summary),
                "epoch_charts": charts(epochs.data), "steps": step_rows, "steps_n": steps_n,
                "system": system_rows, "system_n": system_n,
                "problems": [c.error for c in (steps, system, epochs) if c.error]}
    try:
        live = await asyncio.to_thread(gather)
    except RtjobError as exc:  # the storage cannot be read (run_page.card_of raises only that)
        return JSONResponse({"error": clean(exc.message)}, status_code=failed(exc))
    return JSONResponse(clean_data(live), headers={"cache-control": "no-store"})


async def log(request: Request) -> Response:
    """The log's last 1,000 lines (?lines=N: the last N, scrolling back; ?all=1: all of it), streamed. Header
    x-log-parts: the parts it was read from, for the live stream to start after them."""
    site = site_of(request)
    try:
        story, record = await asyncio.to_thread(site.view_or_404, request)
    except (NotFound, RtjobError) as exc:
        return PlainTextResponse(clean(str(exc)), status_code=failed(exc, 404))
    going = not story.info.status.terminal
    whole = request.query_params.get("all") == "1"
    asked = request.query_params.get("lines", "")
    lines = count(asked) or logs.LOG_TAIL_LINES
    parts = 0
    try:
        if going:
            parts = await asyncio.to_thread(logs.LogFollower(story).count)
        chunks = await asyncio.to_thread(logs.log_tail, record, None if whole else lines)
    except RtjobError as exc:
        if going and failed(exc) != 503:  # a run whose companion has written no part yet
            return text_stream(iter(()), parts=parts)
        return PlainTextResponse(clean(exc.message), status_code=failed(exc, 404))
    response = text_stream((clean(chunk) for chunk in chunks), parts=parts)
    if whole and request.query_params.get("download") == "1":
        response.headers["content-disposition"] = f'attachment; filename="{file_name(record.id)}.log"'
    return response


async def log_search(request: Request) -> Response:
    site = site_of(request)
    needle = request.query_params.get("q", "")
    if not needle:
        return PlainTextResponse("q: what to search for", status_code=400)
    try:
        record = await asyncio.to_thread(site.record_or_404, request)
    except (NotFound, RtjobError) as exc:
        return PlainTextResponse(clean(str(exc)), status_code=failed(exc, 404))

    def matches() -> Iterator[str]:
        try:
            for number, line in logs.log_search(record, needle):
                yield clean(f"{number}: {line}\n")
        except RtjobError as exc:
            yield clean(f"(log not readable: {exc.message})\n")
    return text_stream(matches())


async def log_live(request: Request) -> Response:
    site = site_of(request)
    try:
        story, _record = await asyncio.to_thread(site.view_or_404, request)
        follower = logs.LogFollower(story)
        skip = request.query_params.get("skip", "")
        await asyncio.to_thread(follower.start, count(skip))
    except (NotFound, RtjobError) as exc:
        return PlainTextResponse(clean(str(exc)), status_code=failed(exc, 404))

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
                    fresh = await asyncio.to_thread(run_page.find_run, story.info.id, site.config.lookup_root,
                                                    site.config.endpoint)
                    if fresh is not None and fresh.info.status.terminal:
                        yield "event: ended\ndata: ended\n\n"
                        return
            await asyncio.sleep(LIVE_POLL_S)
    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"cache-control": "no-store"})


async def sample(request: Request) -> Response:
    site = site_of(request)
    try:
        record = await asyncio.to_thread(site.record_or_404, request)
        media, chunks = await asyncio.to_thread(run_page.sample_stream, record, request.path_params["name"])
    except (NotFound, RtjobError) as exc:
        return PlainTextResponse(clean(str(exc)), status_code=failed(exc, 404))
    return StreamingResponse(threaded(chunks), media_type=media)


ROUTES: list[BaseRoute] = [
    Route("/api/runs", runs_json), Route("/api/runs/{run_id}", run_json),
    Route("/api/runs/{run_id}/live", run_live), Route("/runs/{run_id}/log", log),
    Route("/runs/{run_id}/log/search", log_search), Route("/runs/{run_id}/log/live", log_live),
    Route("/runs/{run_id}/samples/{name:path}", sample)]
