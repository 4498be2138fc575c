"""The jobs the repository ships: every jobs/*.yaml, a pipeline file counted as its steps (each a job document)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.cli import REPO


def shipped_jobs() -> list[tuple[Any, Path, str]]:
    """``(validated JobSpec, the file its relative paths are relative to, how errors name it)`` for every job."""
    from rtjob.jobspec.pipeline import load_pipeline
    from rtjob.jobspec.schema import is_pipeline, validate_job
    from rtjob.jobspec.yamlsrc import Located, load_yaml

    out: list[tuple[Any, Path, str]] = []
    for path in sorted((REPO / "jobs").glob("*.y*ml")):
        located = load_yaml(path, f"jobs/{path.name}")
        if is_pipeline(located.data):
            for step in load_pipeline(located, path, REPO).steps:
                out.append((validate_job(Located(step.document, step.shown)), step.path, step.shown))
        else:
            out.append((validate_job(located), path, located.path))
    return out
