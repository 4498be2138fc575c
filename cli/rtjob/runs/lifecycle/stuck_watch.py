"""Watching a running run for a wait that will never end: resources its cluster does not have."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TypeVar

from ...backends.base import Backend
from ...core.errors import BadInput, RtjobError
from ...core.model import RunInfo, RunStatus
from ..events import stop_begins
from .stopping import stop_run

T = TypeVar("T")
# How often a follower asks whether the run waits for resources the cluster does not have: Ray's State API is
# not cheap (on the embedded cluster it takes CPU from training) and every follower asks, so the checks back off
# from STUCK_POLL_S to STUCK_POLL_MAX_S while the run waits for nothing (a run is stuck mostly from its start),
# and come every STUCK_POLL_S again while it waits. Not during the first STUCK_EARLY_S of a follow, though: that
# is when a run asks for its workers (after its imports, slow on a busy node), and a check backed off to minutes
# then would stop a run that can never start minutes late. A wait lasting RTJOB_STUCK_GRACE_S (longer than a
# node takes to join) stops the run.
STUCK_POLL_S = 10.0
STUCK_POLL_MAX_S = 120.0
STUCK_EARLY_S = 180.0
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
    """The run waited for resources its cluster can never give it, and was stopped (exit 2); ``run``: as the stop
    left it."""

    def __init__(self, message: str, run: RunInfo) -> None:
        super().__init__(message)
        self.run = run


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
        self.began = time.monotonic()
        self.next_check = self.began + self.interval
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
            early = now - self.began < STUCK_EARLY_S
            self.interval = STUCK_POLL_S if early else min(self.interval * 2, STUCK_POLL_MAX_S)
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
        self.notice(stop_begins(self.run_id, f"it has waited {now - self.since:.0f}s for resources that will not come"))
        stopped = await asyncio.to_thread(stop_run, self.backend, self.run_id)
        raise NeverFits(f"run {self.run_id} was stopped: it waited for {stuck.reason}; ask for what the cluster "
                        "has (fewer workers, no GPU) or run it on a cluster that has it", stopped)
