"""A pipeline's rules as its supervisor applies them, pure: which step to carry now, and the exit code of the job
hosting the supervisor. Imports: the stdlib and rtjob_contract only (the cluster runs it)."""

from __future__ import annotations

import os

import rtjob_contract as contract

SUCCEEDED = "SUCCEEDED"


def next_step(statuses: list[str | None], stop: bool) -> int | None:
    """A pipeline's rule, pure: the index of the step to carry now (submit or attach to), or None when the pipeline
    has ended (a step that did not succeed, a stop, or all steps SUCCEEDED). A step still running is carried on."""
    if stop:
        return None
    for i, status in enumerate(statuses):
        if status == SUCCEEDED:
            continue
        return i if status in (None, "PENDING", "RUNNING") else None
    return None


def exit_code(status: str | None) -> int:
    """0, except where the job hosting the supervisor shows the pipeline's outcome (RTJOB_SUPERVISOR_EXIT): on Ray
    a supervisor job that FAILED is one that died, and is replaced."""
    if os.environ.get(contract.ENV_SUPERVISOR_EXIT) != "outcome":
        return 0
    return 0 if status == SUCCEEDED else 1
