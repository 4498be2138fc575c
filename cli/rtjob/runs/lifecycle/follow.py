"""Following a run: poll its status and tail its logs at the same time, and decide from the status.

The log stream can end while the job still runs and can miss its last lines (Ray #51601, #46413), so:
the stream is re-opened when it drops (each connection replays the log from its start, and lines already
printed are skipped by count), the outcome comes from the job's status, and once the job has ended the
full log is read once more to print any line the stream never delivered. Skipping by count needs every
source to count lines alike: Ray's full log (and its websocket) reads the file as text, where a lone
carriage return (a progress bar's redraw) ends a line, while the State API stream sends the file's bytes;
so both are split by the same rule (Lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from collections.abc import Callable
from typing import TextIO

from ...backends.base import Backend
from ...core.errors import WaitTimeout
from ...core.model import RunInfo
from ...core.redact import redact
from .patience import Patience
from .stuck_watch import StuckWatch

POLL_S = 1.0
RECONNECT_S = 0.5


class Lines:
    """Complete lines of a text that comes in chunks, ended as Python's text mode ends them (universal newlines:
    "\n", "\r\n" and a lone "\r"), which is how Ray reads a job's full log (JobLogStorageClient.get_logs):
    a line's position is then the same in the stream and in the full log. A "\r" at a chunk's end waits for the
    next chunk (it may be half of a "\r\n")."""

    def __init__(self) -> None:
        self._newlines = io.IncrementalNewlineDecoder(None, translate=True)
        self.rest = ""  # the unfinished last line

    def feed(self, chunk: str, final: bool = False) -> list[str]:
        *lines, self.rest = (self.rest + self._newlines.decode(chunk, final=final)).split("\n")
        return lines


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
        lines_of = Lines()
        try:
            async for chunk in backend.tail(run_id):
                for line in lines_of.feed(chunk):
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
    notice: Callable[[str], None] | None,
) -> RunInfo:
    patience = Patience(notice)
    info = await patience.call(lambda: backend.status(run_id))
    printer = LinePrinter(out, info.secrets) if out is not None else None
    done = asyncio.Event()
    tail_task = asyncio.create_task(_tail_forever(backend, run_id, printer, done)) if printer else None
    watch = StuckWatch(backend, run_id, notice)
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
            await watch.check(info)
            await asyncio.sleep(POLL_S)
            info = await patience.call(lambda: backend.status(run_id))
    finally:
        if tail_task is not None:
            done.set()
            tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tail_task
    if printer is not None:
        # Whatever the stream did not deliver (its last lines, a final line without newline).
        text = await patience.call(lambda: backend.logs(run_id))
        lines_of = Lines()
        lines = lines_of.feed(text, final=True)
        if lines_of.rest:
            lines.append(lines_of.rest)
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
    notice: Callable[[str], None] | None = None,
) -> RunInfo:
    """Follow until the run ends (printing its log to ``out`` unless None). Raises WaitTimeout; faults that
    may pass are retried (``notice`` hears about them) for a grace period, then raised."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    return asyncio.run(_follow(backend, run_id, out, deadline, on_status, notice))
