"""The Ray driver-log tail (backends/ray/logtail.py) against a small aiohttp dashboard: it waits for the driver,
retries a refused State API stream instead of settling for the slow Jobs API websocket, and uses the websocket
only when the dashboard has no stream."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from rtjob.backends.ray import logtail
from rtjob.backends.ray.client import RayJobsAPI

RUN = "run-1"
LOG = "line 1\nline 2\n"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logtail, "DRIVER_POLL_S", 0.01)
    monkeypatch.setattr(logtail, "STREAM_RETRIES_S", (0.01, 0.01, 0.01))


@asynccontextmanager
async def dashboard(pending_polls: int, stream_status: Callable[[int], int]) -> AsyncIterator[tuple[str, Counter]]:
    """A dashboard whose job has no driver for ``pending_polls`` answers; the stream answers
    ``stream_status(n)`` to its n-th request (1-based) and streams the log on 200."""
    calls: Counter[str] = Counter()

    async def job(request: web.Request) -> web.Response:
        calls["job"] += 1
        assert request.headers.get("Authorization") == "Bearer t0ken"
        driver = None if calls["job"] <= pending_polls else "node-a"
        return web.json_response({"status": "RUNNING" if driver else "PENDING", "driver_node_id": driver})

    async def stream(request: web.Request) -> web.StreamResponse:
        calls["stream"] += 1
        assert request.query["node_id"] == "node-a"
        assert request.query["filename"] == f"job-driver-{RUN}.log"
        assert float(request.query["interval"]) <= 0.1
        status = stream_status(calls["stream"])
        if status != 200:
            return web.Response(status=status, text="A file is not found")
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(LOG.encode())
        await resp.write_eof()
        return resp

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        calls["websocket"] += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(LOG)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get(f"/api/jobs/{RUN}", job)
    app.router.add_get("/api/v0/logs/stream", stream)
    app.router.add_get(f"/api/jobs/{RUN}/logs/tail", websocket)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", calls
    finally:
        await runner.cleanup()


def _tail(pending_polls: int, stream_status: Callable[[int], int]) -> tuple[str, Counter]:
    async def run() -> tuple[str, Counter]:
        async with dashboard(pending_polls, stream_status) as (address, calls):
            api = RayJobsAPI(address, {"Authorization": "Bearer t0ken"})
            text = "".join([chunk async for chunk in logtail.tail(api, RUN)])
            return text, calls

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_waits_for_the_driver_then_streams_the_log() -> None:
    text, calls = _tail(pending_polls=5, stream_status=lambda n: 200)
    assert text == LOG
    assert calls["job"] == 6 and calls["stream"] == 1 and calls["websocket"] == 0


def test_a_stream_refused_while_the_file_is_not_there_yet_is_tried_again() -> None:
    # Ray marks the job RUNNING (with its driver node) just before it opens the log file: the first
    # stream requests fail with a 500; the websocket (~2 s bursts) must not be taken for the whole run.
    text, calls = _tail(pending_polls=0, stream_status=lambda n: 500 if n <= 2 else 200)
    assert text == LOG
    assert calls["stream"] == 3 and calls["websocket"] == 0


def test_a_stream_refused_every_time_falls_back_to_the_websocket() -> None:
    text, calls = _tail(pending_polls=0, stream_status=lambda n: 500)
    assert text == LOG
    assert calls["stream"] == 1 + len(logtail.STREAM_RETRIES_S) and calls["websocket"] == 1


def test_a_dashboard_without_the_stream_uses_the_websocket_at_once() -> None:
    text, calls = _tail(pending_polls=0, stream_status=lambda n: 404)
    assert text == LOG
    assert calls["stream"] == 1 and calls["websocket"] == 1


def test_a_dashboard_that_does_not_know_the_job_ends_the_tail() -> None:
    async def run() -> tuple[list[str], Counter]:
        async with dashboard(0, lambda n: 200) as (address, calls):
            api = RayJobsAPI(address, {"Authorization": "Bearer t0ken"})
            chunks = [chunk async for chunk in logtail.tail(api, "another-run")]  # 404: the follower decides
            return chunks, calls

    chunks, calls = asyncio.run(asyncio.wait_for(run(), 30))
    assert chunks == [] and calls["stream"] == 0
