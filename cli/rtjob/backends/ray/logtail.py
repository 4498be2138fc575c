"""Tailing a Ray job's driver log as it is written, for `submit` / `logs -f` (measured in benchmarks/loglat_bench.py).

Two ways to follow the file `job-driver-<id>.log` on the driver's node, with very different latency:
- the State API stream (`/api/v0/logs/stream`): the node's log agent re-reads the file every ``interval``
  seconds (STREAM_INTERVAL_S) and sends what is new at once: lines arrive ~0.02-0.1 s after the print;
- the Jobs API websocket (`/api/jobs/<id>/logs/tail`, what `ray job submit` uses): the job agent sleeps 1 s at
  the end of the file and 1 s more before reading again: lines arrive in bursts ~2 s apart (~1 s median).
The stream needs the driver's node, known only once the job runs, and the file, opened by Ray a moment later:
so the driver is waited for here (soon after submit it is the first thing a follower waits for), a refused
stream is tried again, and the websocket is used only when the dashboard has no State API stream at all.
Both replay the log from its beginning on every connection (runs/lifecycle/follow.py skips what it printed).
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncIterator
from typing import Any

from .client import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, RayJobsAPI

STREAM_INTERVAL_S = 0.1  # the log agent's re-read cadence; lines wait half of it on average
# Waiting for the driver: a job submitted a moment ago starts within seconds, so ask often at first; a run
# that waits for resources is asked about less and less often, down to once a second.
DRIVER_POLL_S = 0.1
DRIVER_POLL_GROWTH = 1.25
DRIVER_POLL_MAX_S = 1.0
# A stream refused for a job that runs: the log file is opened just after the job is marked RUNNING, or a
# fault may pass. Tried again after these pauses; refused every time, the websocket is used instead.
STREAM_RETRIES_S = (0.1, 0.3, 0.6)
NO_STREAM_ROUTE = frozenset({404, 405})  # a dashboard (or a proxy) without the State API's log stream


async def driver_node(session: Any, api: RayJobsAPI, run_id: str, ssl: Any) -> str | None:
    """The driver's node id once the job has one (it runs); None when the dashboard does not answer as
    expected (the caller returns and the follower reconnects: its status polls decide the outcome)."""
    import aiohttp

    quick = aiohttp.ClientTimeout(total=READ_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S)
    delay = DRIVER_POLL_S
    while True:
        async with session.get(f"{api.address}/api/jobs/{run_id}", ssl=ssl, timeout=quick) as resp:
            if resp.status != 200:
                return None
            data = await resp.json()
        node_id = data.get("driver_node_id") if isinstance(data, dict) else None
        if node_id:
            return str(node_id)
        await asyncio.sleep(delay)
        delay = min(delay * DRIVER_POLL_GROWTH, DRIVER_POLL_MAX_S)


async def tail(api: RayJobsAPI, run_id: str) -> AsyncIterator[str]:
    """The driver log from its start, as it is written (see the module's docstring)."""
    import aiohttp

    ssl = bool(api.verify)  # False: no certificate check (--no-verify-tls)
    streaming = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=None)
    async with aiohttp.ClientSession(headers=api.headers) as session:
        node_id = await driver_node(session, api, run_id, ssl)
        if node_id is None:
            return
        params = {"node_id": node_id, "filename": f"job-driver-{run_id}.log", "lines": "-1",
                  "interval": str(STREAM_INTERVAL_S)}
        for pause in (*STREAM_RETRIES_S, None):
            async with session.get(f"{api.address}/api/v0/logs/stream", params=params, ssl=ssl,
                                   timeout=streaming) as resp:
                if resp.status == 200:
                    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # chunks split characters
                    async for chunk in resp.content.iter_any():
                        yield decoder.decode(chunk)
                    return
                if resp.status in NO_STREAM_ROUTE:
                    break
            if pause is not None:
                await asyncio.sleep(pause)
        # No State API stream here: the Jobs API websocket (its handshake bounded too).
        ws = await asyncio.wait_for(session.ws_connect(api.ws_url(f"/api/jobs/{run_id}/logs/tail"), ssl=ssl,
                                                       heartbeat=20), READ_TIMEOUT_S)
        async with ws:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    yield msg.data
                elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    break
