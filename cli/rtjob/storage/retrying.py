"""Storage faults that may pass, waited out: one rule of backoff for the run side and every reader.

A transient ``StorageError`` (core/errors.py: refused, reset, time-out, 5xx, SlowDown) is tried again after a delay
that doubles from FIRST_S up to BACKOFF_MAX_S (15 s between tries); a permanent one (no bucket, denied, no
credentials) is raised at once. A reader gives up after its patience (``reader_patience_s``: contract.ENV_STORAGE_PATIENCE_S,
30 s by default) and raises the last fault (exit 3, `pull`'s words); the run side waits longer (its grace:
contract.ENV_STORAGE_GRACE_S, 600 s, runside/). Importable on the cluster: the stdlib and rtjob.core only.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import rtjob_contract as contract

from ..core.errors import StorageError

T = TypeVar("T")
P = ParamSpec("P")
FIRST_S = 0.5
BACKOFF_MAX_S = 15.0
PATIENCE_VAR = contract.ENV_STORAGE_PATIENCE_S
READER_PATIENCE_S = 30.0


def reader_patience_s() -> float:
    """How long a reader waits out storage faults that may pass before it gives up (exit 3)."""
    try:
        return max(0.0, float(os.environ.get(PATIENCE_VAR) or READER_PATIENCE_S))
    except ValueError:
        return READER_PATIENCE_S


class Backoff:
    """The delays between tries of one outage: FIRST_S, doubling, at most BACKOFF_MAX_S; ``reset`` after a success."""

    def __init__(self, first_s: float = FIRST_S, max_s: float = BACKOFF_MAX_S) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.delay = first_s

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self.max_s)
        return delay

    def reset(self) -> None:
        self.delay = self.first_s


def patiently(call: Callable[[], T], patience_s: float | None = None,
              on_fault: Callable[[StorageError], None] | None = None,
              sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, with its transient storage faults tried again for up to ``patience_s`` (None: a reader's
    patience); a permanent fault, or the last transient one once the patience is spent, is raised. ``on_fault``
    hears each fault (once per try)."""
    limit = reader_patience_s() if patience_s is None else patience_s
    deadline = time.monotonic() + limit
    backoff = Backoff()
    while True:
        try:
            return call()
        except StorageError as exc:
            if not exc.transient:
                raise
            if on_fault is not None:
                on_fault(exc)
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            sleep(min(backoff.next(), left))


# -- a reader's patience, once per outage ------------------------------------------------------------------------
# A command (or `rtjob ui`) reads storage many times; its patience counts from the start of the outage it is in,
# not from each read, so that a command gives up after about its patience however many reads it makes, and during
# a long outage each later read is tried once (the first success ends the outage).

_outage_lock = threading.Lock()
_outage_since: float | None = None


def read_patiently(call: Callable[[], T]) -> T:
    """``call()`` (a read of storage), its transient faults waited out for what is left of a reader's patience in the
    outage this process is in (``reader_patience_s`` from the outage's first fault); a permanent fault at once."""
    global _outage_since

    def fault(_exc: StorageError) -> None:
        global _outage_since
        with _outage_lock:
            if _outage_since is None:
                _outage_since = time.monotonic()

    with _outage_lock:
        since = _outage_since
    patience = reader_patience_s()
    if since is not None:
        patience = max(0.0, patience - (time.monotonic() - since))
    result = patiently(call, patience_s=patience, on_fault=fault)
    with _outage_lock:
        _outage_since = None
    return result


def outage_forgotten() -> None:
    """The next fault begins a new outage (a long-lived process's tests start each from none)."""
    global _outage_since
    with _outage_lock:
        _outage_since = None


def reading(func: Callable[P, T]) -> Callable[P, T]:
    """A reader of storage (a function), patient as ``read_patiently`` says."""

    @functools.wraps(func)
    def patient(*args: P.args, **kwargs: P.kwargs) -> T:
        return read_patiently(lambda: func(*args, **kwargs))

    return patient
