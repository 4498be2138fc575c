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
from typing import TextIO, TypeVar

from ..backends.base import Backend
from ..core.errors import BadInput, RtjobError, WaitTimeout
from ..core.model import RunInfo, RunStatus
from ..core.redact import redact

T = TypeVar("T")
POLL_S = 1.0
RECONNECT_S = 0.5
# How long a follower keeps trying through faults that may pass (502s, resets, time-outs, a proxy's page)
# before it gives up with exit 3; the run itself is never touched. RTJOB_FOLLOW_GRACE_S overrides it.
GRACE_S = 300.0
BACKOFF_MAX_S = 10.0
# How often a follower asks whether the run waits for resources the cluster does not have: Ray's State API is
# not cheap (on the embedded cluster it takes CPU from training) and every follower asks, so the checks back off
# from STUCK_POLL_S to STUCK_POLL_MAX_S while the run waits for nothing (a run is stuck mostly from its start),
# and come every STUCK_POLL_S again while it waits. A wait lasting RTJOB_STUCK_GRACE_S (longer than a node
# takes to join) stops the run.
STUCK_POLL_S = 10.0
STUCK_POLL_MAX_S = 120.0
STUCK_GRACE_S = 60.0


async def _in_daemon_thread(func: Callable[[], T]) -> T:
    """``func()`` in a daemon thread, awaited: unlike asyncio.to_thread, a slow answer (the State API on a busy
    cluster) never holds up the process at exit (Ctrl-C, the run's end)."""
    import threading

    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def deliver(outcome: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this answer any more
            loop.call_soon_threadsafe(outcome)

    def run() -> None:
        try:
            result = func()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            error = exc  # `exc` is unbound once the except block ends; the callback runs later
            deliver(lambda: None if future.done() else future.set_exception(error))
        else:
            deliver(lambda: None if future.done() else future.set_result(result))

    threading.Thread(target=run, name="rtjob-stuck-check", daemon=True).start()
    return await future


class NeverFits(BadInput):
    """The run waited for resources its cluster can never give it, and was stopped (exit 2)."""


class StuckWatch:
    """Asks the backend, now and then, whether a running run waits in vain; stops it after a grace period.

    A wait counts from when it is first seen and ends the run only if the demand is still unmet when the grace
    period is over (Ray Train drops and re-creates its worker group between attempts: a gap is not progress).
    On a cluster that can grow (an autoscaler), it is reported once and the run is left alone."""

    def __init__(self, backend: Backend, run_id: str, notice: Callable[[str], None] | None) -> None:
        import os

        self.backend = backend
        self.run_id = run_id
        self.notice = notice or (lambda _: None)
        self.grace_s = float(os.environ.get("RTJOB_STUCK_GRACE_S") or STUCK_GRACE_S)
        self.interval = STUCK_POLL_S
        self.next_check = time.monotonic() + self.interval
        self.since: float | None = None
        self.warned = False

    async def check(self, info: RunInfo) -> None:
        now = time.monotonic()
        if info.status != RunStatus.RUNNING or now < self.next_check:
            return
        try:
            stuck = await _in_daemon_thread(lambda: self.backend.stuck(self.run_id))
        except RtjobError:  # a fault reading the cluster's state is not a verdict on the run
            self.next_check = time.monotonic() + self.interval
            return
        if stuck is None:
            self.since = None  # it got what it waited for: a later wait (a worker group restarting) starts afresh
            self.interval = min(self.interval * 2, STUCK_POLL_MAX_S)
            self.next_check = time.monotonic() + self.interval
            return
        self.interval = STUCK_POLL_S
        self.next_check = time.monotonic() + self.interval
        if not stuck.final:
            if not self.warned:
                self.notice(f"{self.run_id} waits for {stuck.reason}; waiting for the cluster to add nodes")
                self.warned = True
            return
        if self.since is None:
            self.since = now
            self.notice(f"{self.run_id} waits for {stuck.reason}; stopping it in {self.grace_s:.0f}s "
                        "unless that changes")
            return
        if now - self.since < self.grace_s:
            return
        self.notice(f"stopping {self.run_id}: it has waited {now - self.since:.0f}s for resources that will not come")
        await asyncio.to_thread(self.backend.stop, self.run_id)
        raise NeverFits(f"run {self.run_id} was stopped: it waited for {stuck.reason}; ask for what the cluster "
                        "has (fewer workers, no GPU) or run it on a cluster that has it")


class Patience:
    """Retries a call through retriable faults with backoff, within one grace period per outage."""

    def __init__(self, notice: Callable[[str], None] | None) -> None:
        import os

        self.grace_s = float(os.environ.get("RTJOB_FOLLOW_GRACE_S") or GRACE_S)
        self.notice = notice or (lambda _: None)
        self.outage_since: float | None = None
        self.faults = 0

    def _failed(self, exc: RtjobError, delay: float) -> float:
        """After a failed try: the next delay, or re-raise when it is not retriable or the grace is spent."""
        if not exc.retriable:
            raise exc
        now = time.monotonic()
        self.faults += 1
        if self.outage_since is None:
            self.outage_since = now
            self.notice(f"lost contact ({exc.message}); retrying for up to {self.grace_s:.0f}s, "
                        "the run is not affected")
        if now - self.outage_since >= self.grace_s:
            raise exc
        return min(delay * 2, BACKOFF_MAX_S)

    def _recovered(self) -> None:
        if self.outage_since is not None:
            self.notice(f"contact restored after {time.monotonic() - self.outage_since:.0f}s")
            self.outage_since = None

    async def call(self, func: Callable[[], T]) -> T:
        delay = POLL_S / 2
        while True:
            try:
                result = await asyncio.to_thread(func)
            except RtjobError as exc:
                delay = self._failed(exc, delay)
                await asyncio.sleep(delay)
                continue
            self._recovered()
            return result

    def call_sync(self, func: Callable[[], T]) -> T:
        delay = POLL_S / 2
        while True:
            try:
                result = func()
            except RtjobError as exc:
                delay = self._failed(exc, delay)
                time.sleep(delay)
                continue
            self._recovered()
            return result


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
