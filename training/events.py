"""Event lines rtjob's entrypoints print for the run's start-up timeline (rtjob_contract.EVENT_LINE_PREFIX): the
run-side companion notes when it sees each. Torch-free: any entrypoint can call it."""

from __future__ import annotations

import os

import rtjob_contract as contract

_said: set[str] = set()


def first_step(rank: int | None = None) -> None:
    """Once per process, on the first rank only (``rank``, else $RANK): the first training step is done."""
    rank = int(os.environ.get("RANK", "0") or 0) if rank is None else rank
    if contract.EVENT_FIRST_STEP in _said or rank != 0:
        return
    _said.add(contract.EVENT_FIRST_STEP)
    print(f"{contract.EVENT_LINE_PREFIX} {contract.EVENT_FIRST_STEP}", flush=True)
