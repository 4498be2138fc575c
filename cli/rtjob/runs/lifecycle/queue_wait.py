"""Following a run through QUEUED (issue 44): `submit` and `wait` of a queued run wait here until its queue's keeper
admitted it (then follow.py follows it on the cluster as any run) or it was cancelled. Each change of its place is
told once; the --timeout counts this wait too; a keeper whose lease lapsed is started again (a carrying command
does that, as `wait` replaces a dead supervisor). Reads the run's record and its queue; writes only this ledger's
row (a cache) and, through the queue's client, a keeper's start."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...core.errors import RtjobError, WaitTimeout
from ...core.model import RunStatus

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo
    from ...core.record import RunRecord
    from ..events import RunEvents

POLL_S = 1.0


def _current(run_id: str) -> RunRecord | None:
    """The run's record as its writers left it: this ledger's row merged with the stored one (None: no row)."""
    from ...core.lifecycle import merge
    from ..memory import ledger, stored_record

    try:
        row = ledger().get(run_id)
    except RtjobError:
        return None
    if row is None:
        return None
    try:
        return merge(row, stored_record(row))
    except RtjobError:
        return row


def _on_the_cluster(backend: Backend, run_id: str) -> bool:
    """Whether the cluster knows the run (its keeper submitted it under its id): admitted, whatever a record this
    machine reads says yet. A cluster that does not answer: not known yet."""
    try:
        return backend.find(run_id) is not None
    except RtjobError:
        return False


def cancelled_while_queued(backend: Backend, run_id: str) -> RunInfo | None:
    """`rtjob stop` of a queued run: cancelled in its queue and recorded STOPPED (None: it is not queued, or its
    keeper admitted it first: stop it on the cluster)."""
    from ...core.lifecycle import Cancelled, Writer
    from ...core.verdict import of_record
    from ..events import Quiet
    from ..memory import keep, stored_record, write
    from ..queued import cancel_intent

    record = _current(run_id)
    if record is None or record.run_status != RunStatus.QUEUED:
        return None
    cancel_intent(record)  # from here its keeper never admits it (and stops it if it had been first)
    write(record, Cancelled(by=Writer.FOLLOWER), Quiet())  # STOPPED, never sent
    fresh = stored_record(record)
    if fresh is not None and fresh.run_status != RunStatus.STOPPED:  # refused: its keeper admitted it first
        keep(fresh, Quiet())
        return None
    done = fresh or record
    return of_record(done).onto(done.to_run_info())


def until_admitted(backend: Backend, run_id: str, *, remaining: Callable[[], float | None], events: RunEvents,
                   poll_s: float | None = None) -> RunInfo | None:
    """Wait while the run is QUEUED (its keeper made sure of first). None: it was never queued, or it is admitted now
    (follow it on the cluster);
    a RunInfo: it ended while queued (cancelled), as its record says. ``remaining()`` raises the --timeout's
    WaitTimeout when the time is up: raised again saying the run is still queued."""
    from ...core.verdict import of_record
    from ..memory import keep
    from ..queued import ensure_keeper_of, place

    record = _current(run_id)
    if record is None or record.run_status != RunStatus.QUEUED:
        return None
    told: str | None = None
    ensure_keeper_of(backend, record)  # a carrying command: a keeper whose lease lapsed is started again
    restarted = False
    while True:
        record = _current(run_id) or record
        if record.run_status == RunStatus.QUEUED and _on_the_cluster(backend, run_id):
            events.note(f"{run_id}: admitted by its queue's keeper")  # its record says so a moment later
            return None
        if record.run_status != RunStatus.QUEUED:
            keep(record, events)  # this ledger's cache: the keeper's admission or its cancel
            if record.run_status.terminal:
                return of_record(record).onto(record.to_run_info())
            events.note(f"{run_id}: admitted by its queue's keeper")
            return None
        where = place(record)
        seen = of_record(record, place=where)
        if seen.line != told:
            events.note(f"{run_id}: {seen.status.value}: {seen.line}")
            told = seen.line
        if where is not None and where.keeper_alive is False and not restarted:
            events.note(f"{run_id}: its queue's keeper is not running: starting {ensure_keeper_of(backend, record)}")
            restarted = True
        try:
            left = remaining()
        except WaitTimeout:  # the --timeout while it waits: it never ran, and stays in its queue
            queue = (record.queue or {}).get("name") or "its queue"
            raise WaitTimeout(f"run {run_id} is still queued in {queue} after the --timeout; it stays queued (rtjob "
                              f"wait {run_id} to keep waiting, rtjob stop {run_id} to cancel it)") from None
        time.sleep(min(POLL_S if poll_s is None else poll_s, left) if left is not None else
                   (POLL_S if poll_s is None else poll_s))
