"""A pipeline file: a job file with ``steps:`` instead of an entrypoint, each step one run.

```yaml
name: voice-clone
defaults:                 # job fields every inline step starts from (deep-merged: args, env_vars, tags, local)
  requirements: requirements-hf.txt
  compute_config: g5-4xlarge
steps:
  - name: process         # an inline job: any job field (entrypoint, args, nodes, resources_per_worker, local ...)
    entrypoint: python -m training.voice.process
  - name: train
    job: hf-sft           # a job of this project (jobs/hf-sft.yaml or a path), with the step's fields on top
    args: {epochs: 2}
```

Each step becomes a plain job document (``JobSource``): resolve, plan, render and submit treat it as any job, so
nothing downstream knows pipelines exist. A step's job name is ``<pipeline>-<step>``; validation errors point at
the pipeline file's lines (or the referenced job file's). Pure: reads files, never a cluster.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from .yamlsrc import Located, load_yaml

STEP_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
PIPELINE_KEYS = ("name", "description", "defaults", "steps")
STEP_KEYS = ("name", "job")  # a step's own keys; every other key is a job field
# Job fields whose mappings merge key by key (defaults < the referenced job < the step); others are replaced.
MERGED = ("args", "env_vars", "tags", "local")


@dataclass
class Step:
    name: str
    job_name: str  # <pipeline>-<step>: the run's job name (its storage folder)
    path: Path  # the file whose folder the document's relative paths (requirements, working_dir) are relative to
    shown: str  # how errors and the run record name it: "jobs/voice-clone.yaml step train"
    document: dict[str, Any]  # a complete job document
    declares_nodes: bool  # the step (or its job) sets nodes: --nodes leaves it alone


@dataclass
class Pipeline:
    name: str
    description: str
    path: Path
    shown: str
    steps: list[Step]
    document: dict[str, Any]

    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    def index(self, step: str, flag: str) -> int:
        names = self.step_names()
        if step not in names:
            raise BadInput(f"{flag} {step!r}: {self.shown} has no such step (steps: {', '.join(names)})")
        return names.index(step)


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``: the MERGED mappings key by key (``local`` one level deeper), the rest replaced."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if key in MERGED and isinstance(value, dict) and isinstance(out.get(key), dict):
            if key == "local":
                out[key] = merge(out[key], value)
            else:
                out[key] = {**out[key], **copy.deepcopy(value)}
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_pipeline(located: Located, path: Path, root: Path) -> Pipeline:
    """A parsed pipeline file → its steps as job documents, each validated (errors: file:line)."""
    from .project import find_job_file
    from .schema import NAME_RE, JobSpec, describe_validation_error, is_pipeline, validate_job

    data, where = located.data, located.where
    assert isinstance(data, dict)
    unknown = [k for k in data if k not in PIPELINE_KEYS]
    if unknown:
        raise BadInput(f"{where((unknown[0],))}: unknown key {unknown[0]!r} in a pipeline (valid keys: "
                       f"{', '.join(PIPELINE_KEYS)}; job fields go under defaults: or a step)")
    name = data.get("name")
    if not isinstance(name, str) or not re.match(NAME_RE, name):
        raise BadInput(f"{where(('name',))}: a pipeline needs a name (letters, digits, '.', '_', '-')")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise BadInput(f"{where(('defaults',))}: defaults: must be a mapping of job fields")
    for key in ("name", "entrypoint"):
        if key in defaults:
            raise BadInput(f"{where(('defaults', key))}: defaults.{key}: each step sets its own {key}")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise BadInput(f"{where(('steps',))}: steps: must be a non-empty list of steps (each with a name, and "
                       "job: NAME or an entrypoint)")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        at = ("steps", i)
        if not isinstance(raw, dict):
            raise BadInput(f"{where(at)}: a step must be a mapping with a name, and job: NAME or an entrypoint")
        step_name = raw.get("name")
        if not isinstance(step_name, str) or not STEP_NAME_RE.match(step_name):
            raise BadInput(f"{where((*at, 'name'))}: each step needs a name of 1-32 lowercase letters, digits, "
                           "'_' or '-' (it ends its run id: <pipeline id>-<step>)")
        if step_name in [s.name for s in steps]:
            raise BadInput(f"{where((*at, 'name'))}: step name {step_name!r} is used twice")
        fields = {k: v for k, v in raw.items() if k not in STEP_KEYS}
        job_ref = raw.get("job")
        base_path, base_shown, base = path, located.path, defaults
        if job_ref is not None:
            if not isinstance(job_ref, str) or not job_ref:
                raise BadInput(f"{where((*at, 'job'))}: job: names a job of this project (jobs/NAME.yaml) or a path")
            job_path, job_shown = _job_path(find_job_file, job_ref, path, root, where((*at, 'job')))
            job_located = load_yaml(job_path, job_shown)
            if is_pipeline(job_located.data):
                raise BadInput(f"{where((*at, 'job'))}: {job_shown} is a pipeline; a step runs one job")
            validate_job(job_located)  # its own errors point at its own file
            base_path, base_shown = job_path, job_shown
            base = merge(defaults, {k: v for k, v in job_located.data.items() if k != "name"})
        elif "entrypoint" not in fields:
            raise BadInput(f"{where(at)}: step {step_name!r} needs job: NAME or an entrypoint")
        document = merge(base, fields)
        document["name"] = f"{name}-{step_name}"

        # A field the step sets points at its line, one from defaults at that line, else the step (or its job).
        fallback = f"{base_shown} (step {step_name})" if job_ref is not None else where(at)

        def step_where(loc: tuple[str | int, ...], fields: dict[str, Any] = fields, at: tuple = at,
                       fallback: str = fallback) -> str:
            if loc and loc[0] in fields:
                return where((*at, *loc))
            if loc and loc[0] in defaults:
                return where(("defaults", *loc))
            return fallback

        from pydantic import ValidationError

        try:
            JobSpec.model_validate(document)
        except ValidationError as exc:
            raise BadInput(describe_validation_error(exc, JobSpec, step_where, f"step {step_name}")) from None
        steps.append(Step(
            name=step_name, job_name=document["name"], path=base_path,
            shown=f"{located.path} step {step_name}", document=document,
            declares_nodes="nodes" in fields or (job_ref is not None and "nodes" in base and "nodes" not in defaults),
        ))
    return Pipeline(name=name, description=str(data.get("description") or ""), path=path, shown=located.path,
                    steps=steps, document=data)


def _job_path(find_job_file: Any, ref: str, pipeline_path: Path, root: Path, where: str) -> tuple[Path, str]:
    """A step's job: a name in the project's jobs/, or a path relative to the pipeline file's folder."""
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        candidate = (pipeline_path.parent / ref) if not Path(ref).is_absolute() else Path(ref)
        if not candidate.is_file():
            raise BadInput(f"{where}: job file {ref!r} not found (relative to {pipeline_path.parent})")
        return find_job_file(str(candidate), root)
    try:
        found: tuple[Path, str] = find_job_file(ref, root)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc.message}") from None
    return found
