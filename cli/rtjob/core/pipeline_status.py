"""A pipeline run's status from its steps' statuses: one rule that the client (runs/pipelines/) and the pipeline's
supervisor on the cluster (runside/supervisor/pipeline_folder.py) both apply, so it lives below both (the kernel's
ends apply it; a pipeline run's verdict is core/pipeline_verdict.py, above the kernel).

Stdlib and rtjob.core only: the cluster runs it (import-linter: lifecycle-kernel)."""

from __future__ import annotations

from .model import RunStatus


def overall(statuses: list[RunStatus | None]) -> RunStatus:
    """A pipeline run's status from its steps' (None: not submitted yet): the first step that did not succeed
    decides; all succeeded is SUCCEEDED; else it is RUNNING once a step was submitted."""
    for status in statuses:
        if status in (RunStatus.FAILED, RunStatus.STOPPED, RunStatus.UNKNOWN):
            return status
        if status != RunStatus.SUCCEEDED:
            return RunStatus.RUNNING if any(s is not None for s in statuses) else RunStatus.PENDING
    return RunStatus.SUCCEEDED
