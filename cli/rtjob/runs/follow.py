"""Following a run: poll its status and tail its logs at the same time, and decide from the status.

The log stream can end while the job still runs and can miss its last lines (Ray #51601, #46413), so:
the stream is re-opened when it drops (each connection replays the log from its start, and lines already
printed are skipped by count), the outcome comes from the job's status, and once the job has ended the
full log is read once more to print any line the stream never delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from typing import TextIO

from ..backends.base import Backend
from ..core.errors import WaitTimeout
from ..core.model import RunInfo
from ..core.redact import redact

POLL_S = 1.0
RECONNECT_S = 0.5


class LinePrinter:
    """Prints complete lines once each, counting them so a replayed stream can be skipped."""

    def __init__(self, out: TextIO, secrets: list[str]) -> None:
        self.out = out
        self.secrets = secrets
        self.printed = 0

    def emit(self, line: str) -> None:
        self.out.write(redact(line, self.secrets) + "\n")
        self.out.flush()
        self.printed += 1


async def _tail_forever(backend: Backend, run_id: str, printer: LinePrinter, done: asyncio.Event) -> None:
    while not done.is_set():
        seen = 0
        buffer = ""
        try:
            async for chunk in backend.tail(run_id):
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    seen += 1
                    if seen > printer.printed:
                        printer.emit(line)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - any drop of the stream: reconnect, the status decides
            pass
        if not done.is_set():
            await asyncio.sleep(RECONNECT_S)


async def _follow(
    backend: Backend,
    run_id: str,
    out: TextIO | None,
    deadline: float | None,
    on_status: Callable[[RunInfo], None] | None,
) -> RunInfo:
    info = await asyncio.to_thread(backend.status, run_id)
    printer = LinePrinter(out, info.secrets) if out is not None else None
    done = asyncio.Event()
    tail_task = asyncio.create_task(_tail_forever(backend, run_id, printer, done)) if printer else None
    last_status = None
    try:
        while True:
            if info.status != last_status and on_status:
                on_status(info)
            last_status = info.status
            if info.status.terminal:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"run {run_id} is still {info.status.value} after the --timeout; it was left running "
                    f"(rtjob wait {run_id} to keep waiting, rtjob stop {run_id} to stop it)"
                )
            await asyncio.sleep(POLL_S)
            info = await asyncio.to_thread(backend.status, run_id)
    finally:
        if tail_task is not None:
            done.set()
            tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tail_task
    if printer is not None:
        # Whatever the stream did not deliver (its last lines, a final line without newline).
        text = await asyncio.to_thread(backend.logs, run_id)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for line in lines[printer.printed:]:
            printer.emit(line)
    return info


def follow(
    backend: Backend,
    run_id: str,
    *,
    out: TextIO | None = sys.stdout,
    timeout_s: float | None = None,
    on_status: Callable[[RunInfo], None] | None = None,
) -> RunInfo:
    """Follow until the run ends (printing its log to ``out`` unless None). Raises WaitTimeout."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    return asyncio.run(_follow(backend, run_id, out, deadline, on_status))
