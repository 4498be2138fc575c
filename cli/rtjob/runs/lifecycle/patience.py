"""Waiting out faults that may pass (502s, resets, time-outs, a proxy's page): a call is retried with backoff
within one grace period per outage, and the run itself is never touched."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from ...core.errors import RtjobError

T = TypeVar("T")
FIRST_RETRY_S = 0.5
# How long a follower keeps trying through faults that may pass before it gives up with exit 3.
# RTJOB_FOLLOW_GRACE_S overrides it.
GRACE_S = 300.0
BACKOFF_MAX_S = 10.0


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
        delay = FIRST_RETRY_S
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
        delay = FIRST_RETRY_S
        while True:
            try:
                result = func()
            except RtjobError as exc:
                delay = self._failed(exc, delay)
                time.sleep(delay)
                continue
            self._recovered()
            return result
