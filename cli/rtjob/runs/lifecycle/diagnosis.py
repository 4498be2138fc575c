"""What a failed run's driver log plainly says went wrong, as one line a user can act on.

Only what the log states outright: a missing module is named by Python itself. A pip name is given only when
this machine knows which distribution provides that module (importlib.metadata), never guessed from the name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...core.errors import RtjobError

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo
    from ...core.record import RunRecord

# The last one wins: an earlier one may have been caught and handled by the script.
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")


def missing_module(log_text: str) -> str | None:
    """The module a ``ModuleNotFoundError`` in the driver log names (its top-level package), or None."""
    found = _MISSING.findall(log_text)
    return found[-1].split(".")[0] if found else None


def pip_names(module: str) -> list[str]:
    """The distributions that provide ``module`` in this environment (none when it is not installed here)."""
    import importlib.metadata

    return sorted(set(importlib.metadata.packages_distributions().get(module, [])))


def missing_module_hint(log_text: str, job_file: str | None, step: str | None = None) -> str | None:
    """One line naming the missing module and where to declare it, or None when the log shows none."""
    module = missing_module(log_text)
    if module is None:
        return None
    names = pip_names(module)
    package = f" (pip: {', '.join(names)})" if names else ""
    where = f"the `requirements:` of {job_file}" if job_file else "the job's `requirements:`"
    if step:
        where += f" (step {step})"
    return f"the run failed on a missing package: module {module!r}{package} is not installed on the cluster; " \
           f"add it to {where}, or use an image_uri that has it"


DIAGNOSED_LINES = 200  # the end of a failed run's log, where Python's last traceback is


def diagnose(backend: Backend, info: RunInfo, record: RunRecord | None) -> str | None:
    """What a FAILED run's log plainly says went wrong (a missing module: which job file, and step, to declare it
    in), as one line; None when it says nothing rtjob can act on or cannot be read."""
    from ..memory import find

    try:
        text = backend.last_lines(info.id, DIAGNOSED_LINES)
    except RtjobError:
        return None
    step = None
    if record is not None and record.pipeline:  # a step's run: the step is named in its pipeline run's record
        try:
            pipeline = find(record.pipeline)
        except RtjobError:
            pipeline = None
        step = next((str(s.get("name")) for s in (pipeline.steps if pipeline else [])
                     if s.get("run_id") == record.id), None)
    return missing_module_hint(text, record.job_file if record else None, step)
