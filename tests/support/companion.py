"""The job's own entrypoint inside the one rtjob gives Ray (the run-side companion runs it)."""

from __future__ import annotations

import shlex

WRAPPER = ["python", "-m", "rtjob.runside.companion"]


def inner(entrypoint: str) -> str:
    """The entrypoint the job declared: the companion's one argument, or the entrypoint itself when bare."""
    words = shlex.split(entrypoint)
    if words[:3] == WRAPPER and len(words) == 4:
        return words[3]
    return entrypoint
