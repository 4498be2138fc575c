"""Event lines rtjob's entrypoints print for the run's start-up timeline (rtjob_contract.EVENT_LINE_PREFIX): the
run-side companion notes when it sees each. Torch-free: any entrypoint can call it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import rtjob_contract as contract

_said: set[str] = set()


def say_once(event: str, rank: int | None = None) -> None:
    """Print ``event``'s line once per process, on the first rank only (``rank``, else $RANK).

    Written to stdout directly, not with print(): in a Ray Train worker print() is patched to go to Ray's logger
    and, where stdout is redirected, to stdout as well, so a printed event reached the driver's log twice."""
    rank = int(os.environ.get("RANK", "0") or 0) if rank is None else rank
    if event in _said or rank != 0:
        return
    _said.add(event)
    write(event)


def write(event: str, payload: str = "") -> None:
    """One event line, ``rtjob-event: EVENT [PAYLOAD]``, written to stdout directly (see say_once)."""
    sys.stdout.write(f"{contract.EVENT_LINE_PREFIX} {event}{' ' + payload if payload else ''}\n")
    sys.stdout.flush()


def write_row(event: str, row: dict[str, Any]) -> None:
    """One event line carrying ``row`` as compact JSON (the step and system rows the companion collects)."""
    write(event, json.dumps(row, separators=(",", ":")))


def first_step(rank: int | None = None) -> None:
    """The first training step is done."""
    say_once(contract.EVENT_FIRST_STEP, rank)


def workers_started(rank: int | None = None) -> None:
    """A Ray Train worker group is up: its loop has started (before data, model and the first checkpoint)."""
    say_once(contract.EVENT_WORKERS_STARTED, rank)
