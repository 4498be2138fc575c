"""The client's follow loop (`submit`, `wait`, `logs --follow`, each pipeline step a client advances): a run
followed to its end through its attempts, each write by its lifecycle-kernel name (core/lifecycle/).

One attempt is followed by polling its status (the outcome comes from the status, never from the end of the log
stream) while its log is printed (logtail.py) and a wait that can never end is watched for (stuck_watch.py). A
FAILED attempt the backend retries (a lost driver, the one retry rule) is followed into the next one: where this
client submitted the retry, it writes ``retrying`` and tells `notify: on: [retrying]`. A `wait` first replaces
the run's supervisor if it died (``carry``). At the end the client writes what it saw: ``archived`` (archive.py;
the run side's end stands where it wrote one). Ctrl-C stops the run (``stop_run``, then ``archived`` STOPPED) or
leaves it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from ...core import lifecycle
from ...core.errors import RtjobError, WaitTimeout
from ...core.lifecycle import Writer
from ...core.model import RunInfo, RunStatus
from ...core.verdict import verdict
from ..events import stop_begins
from .archive import observe
from .logtail import LinePrinter, tail_forever
from .patience import Patience
from .stopping import stop_run
from .stuck_watch import NeverFits, StuckWatch

if TYPE_CHECKING:
    from ...backends.base import Backend, Request, Retry
    from ..events import RunEvents

POLL_S = 1.0


@dataclass
class EndSeen:
    """The followed run ended (``stopped``: by this follower, on Ctrl-C with stop-on-interrupt)."""

    run: RunInfo
    stopped: bool = False


@dataclass
class Detached:
    """Ctrl-C without stop-on-interrupt: the run keeps running (``run``: as last seen, if it was)."""

    run_id: str
    run: RunInfo | None = field(default=None, compare=False)


@dataclass
class Abandoned:
    """rtjob stopped following before the run's end (``error``: the --timeout, a cluster that could not be reached,
    a run stopped because it waits in vain); ``run`` is the run as last seen, if it was."""

    run_id: str
    error: RtjobError
    run: RunInfo | None = None


Followed = EndSeen | Detached | Abandoned


def follow_to_end(backend: Backend, run_id: str, *, out: TextIO | None, timeout_s: float | None,
                  stop_on_interrupt: bool, events: RunEvents, request: Request | None = None,
                  carry: RunInfo | None = None, read_only: bool = False) -> Followed:
    """Follow the run (its log to ``out`` unless None) through its retries until it ends, then write its end as
    seen (``archived``). ``carry`` (`wait`: the run as it found it): a supervisor that died while the run had
    something left to carry is replaced first. Ctrl-C stops it (``stop_on_interrupt``) or leaves it running. An error that ends the follow
    (the --timeout, a lost cluster, a run that waits in vain) is returned, with the run as last seen: whoever
    prints the outcome still has the run to show. ``read_only`` (`logs --follow`, a read): it acts on nothing,
    neither archiving the end, nor submitting a retry, nor stopping a run that waits in vain."""
    last: list[RunInfo] = []
    try:
        if carry is not None:  # what `wait` may do and `status` may not (once: the replacement's id is fixed)
            from .supervisor_state import supervisor_state

            supervisor_state(backend, carry, events.note)
        info = follow_run(backend, run_id, out=out, timeout_s=timeout_s, events=events, request=request,
                          seen=last.append, read_only=read_only)
    except NeverFits as exc:  # stopped by the follower: its end as the stop left it
        observe(backend, exc.run, events, run_id=run_id)
        return Abandoned(run_id, exc, exc.run)
    except RtjobError as exc:
        return Abandoned(run_id, exc, last[-1] if last else None)
    except KeyboardInterrupt:
        if not stop_on_interrupt:
            events.detached(run_id)
            return Detached(run_id, last[-1] if last else None)
        events.note(stop_begins(run_id, "interrupted"))
        info = stop_run(backend, run_id)
        events.note(f"{run_id}: {info.status.value}")
        observe(backend, info, events, run_id=run_id)  # archived STOPPED
        return EndSeen(info, stopped=True)
    if read_only:  # a read archives nothing: the end as the records known now tell it with the backend's
        from ..memory import find, with_run_side

        known = find(run_id)
        record = with_run_side(known) if known is not None else None
    else:
        record = observe(backend, info, events, run_id=run_id)  # archived: end, logs saved
    if record is not None:  # the end as every view says it: the run side's words, outputs (exit 3), whole duration
        info = verdict(record, None, info).onto(info)
    events.ended(info)
    if info.status == RunStatus.FAILED:
        from .diagnosis import diagnose

        hint = diagnose(backend, info, record)
        if hint is not None:
            events.note(hint)
    return EndSeen(info)


def follow_run(backend: Backend, run_id: str, *, out: TextIO | None, timeout_s: float | None, events: RunEvents,
               request: Request | None = None, seen: Callable[[RunInfo], None] | None = None,
               read_only: bool = False) -> RunInfo:
    """Follow ``run_id`` (its latest attempt, if it was retried already) until it ends; a FAILED run that the
    backend retries is followed into its next attempt (``read_only``: not, since asking may submit it). The
    outcome comes from the run's status; ``seen`` hears each status read that changed."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    current = run_id

    def remaining() -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"run {current} is still running after the --timeout; it was left running "
                              f"(rtjob wait {current} to keep waiting, rtjob stop {current} to stop it)")
        return left

    from .queue_wait import until_admitted  # a queued run: through QUEUED first, the --timeout counting

    ended = until_admitted(backend, run_id, remaining=remaining, events=events)
    if ended is not None:
        return ended  # cancelled while queued
    patience = Patience(events.note)
    known = patience.call_sync(lambda: backend.attempts(run_id))
    if known is not None and known.chain and known.chain[-1].id != run_id and any(a.id == run_id for a in known.chain):
        current = known.chain[-1].id
        events.note(f"{run_id} was retried: following attempt {known.chain[-1].attempt} ({current})")
    while True:
        info = follow(backend, current, out=out, timeout_s=remaining(), on_status=_not_ended(events, seen),
                      notice=events.note, watch_stuck=not read_only)
        if info.status != RunStatus.FAILED or read_only:
            return info
        decision = patience.call_sync(functools.partial(backend.retry, current, request))
        if decision is None or decision.reason is None:
            return info
        if decision.next_run is None:
            if decision.max_retries:
                events.note(f"{current} FAILED: {decision.reason}; no retries left (max_retries {decision.max_retries})")
            return info
        events.retrying(current, decision)
        if decision.created:  # this client submitted it: it writes the retry and tells the run's notify targets
            record_retry(run_id, info, decision, events)
        current = decision.next_run.id


def record_retry(run_id: str, info: RunInfo, decision: Retry, events: RunEvents) -> None:
    """The kernel's ``retrying`` (PENDING again, the failed attempt kept), written for the retry this client
    submitted, then `notify: on: [retrying]` told once (its claim after the record and the index entry)."""
    from ..memory import find, stored, write
    from .retry_notice import retry_teller

    assert decision.reason is not None and decision.next_run is not None
    try:
        record = find(run_id) or stored(info)
    except RtjobError:
        record = None
    if record is None:
        return
    write(record, lifecycle.Retrying(decision.attempt, decision.reason, decision.failed_id, decision.next_run.id,
                                     by=Writer.FOLLOWER), events, tell=retry_teller(run_id, decision, events))


def _not_ended(events: RunEvents, seen: Callable[[RunInfo], None] | None) -> Callable[[RunInfo], None]:
    """follow's status callback: a change worth telling, until the run ends (its end is the caller's to tell)."""
    def heard(info: RunInfo) -> None:
        if seen is not None:
            seen(info)
        if not info.status.terminal:
            events.status(info)
    return heard


def follow(backend: Backend, run_id: str, *, out: TextIO | None = sys.stdout, timeout_s: float | None = None,
           on_status: Callable[[RunInfo], None] | None = None, notice: Callable[[str], None] | None = None,
           watch_stuck: bool = True) -> RunInfo:
    """Follow one attempt until it ends (printing its log to ``out`` unless None); ``watch_stuck``: a run that
    waits in vain is stopped (stuck_watch.py). Raises WaitTimeout; faults that may pass are retried (``notice``
    hears about them) for a grace period, then raised."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    return asyncio.run(_attempt(backend, run_id, out, deadline, on_status, notice, watch_stuck))


async def _attempt(backend: Backend, run_id: str, out: TextIO | None, deadline: float | None,
                   on_status: Callable[[RunInfo], None] | None, notice: Callable[[str], None] | None,
                   watch_stuck: bool) -> RunInfo:
    """One attempt: its status polled every POLL_S (told on each change) while its log prints, to its end."""
    patience = Patience(notice)
    info = await patience.call(lambda: backend.status(run_id))
    printer = LinePrinter(out, info.secrets) if out is not None else None
    done = asyncio.Event()
    tail_task = asyncio.create_task(tail_forever(backend, run_id, printer, done)) if printer else None
    watch = StuckWatch(backend, run_id, notice) if watch_stuck else None
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
            if watch is not None:
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
        printer.print_rest(await patience.call(lambda: backend.logs(run_id)))
    return info
