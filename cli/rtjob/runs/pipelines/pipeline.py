"""Pipelines as use cases (no Click): plan every step before anything runs, record the pipeline run, and say
what its steps' runs add up to.

A pipeline run has its own id (``--submission-id``, else a new one); step ``S`` runs as ``<id>-S``, so every id and
every storage folder is fixed at plan time (a dry run shows them) and submitting the same pipeline id again attaches
to the steps that exist instead of running them twice. Each step's environment carries the run folders of the steps
before it (``RTJOB_INPUT_URI``: the previous one; ``RTJOB_STEP_URIS``: all of them by name). ``--from STEP ID`` plans
a new pipeline run that reuses the runs of ID's steps before STEP (found through the run history).

On Ray, a supervisor on the cluster runs the steps (supervised.py): ``--no-wait`` leaves the whole pipeline to it; on
Anyscale the supervisor is the driver of one Anyscale job that runs the steps on its cluster.
Where a backend has none, steps advance while a follower runs and ``--no-wait`` submits the next step only; the
same submit with ``--submission-id ID`` goes on from there.
The step loop itself (run, wait) is in steps.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.errors import BadInput, RtjobError
from ...core.model import RunStatus, check_run_id
from ...core.pipeline_status import overall
from ...core.record import RunRecord

if TYPE_CHECKING:

    from ...backends.base import Backend
    from ...jobspec.pipeline import Pipeline
    from ...jobspec.resolve import JobSource, Overrides
    from ...jobspec.settings import Settings
    from ..events import RunEvents
    from ..runner import Plan


@dataclass
class StepPlan:
    name: str
    run_id: str
    storage_uri: str | None
    plan: Plan | None  # None: the run of an earlier pipeline run is reused (--from)
    reused_from: str | None = None  # that pipeline run's id

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "run_id": self.run_id, "storage_uri": self.storage_uri,
                "reused_from": self.reused_from}


@dataclass
class PipelinePlan:
    id: str
    pipeline: Pipeline
    backend: Backend
    settings: Settings
    steps: list[StepPlan]
    storage_uri: str | None  # <storage root>/<pipeline>/<id>: the pipeline run's record
    storage_endpoint: str | None

    @property
    def storage_root(self) -> str | None:
        """The storage root its runs' folders are under (<root>/<pipeline>/<id> is its own)."""
        return self.storage_uri.rsplit("/", 2)[0] if self.storage_uri else None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pipeline": self.pipeline.name, "file": self.pipeline.shown,
                "storage_uri": self.storage_uri, "steps": [s.to_json() for s in self.steps]}


def load(ref: str, root: Any) -> Pipeline | JobSource:
    """The pipeline ``ref`` names (a job name or path), or, for a plain job, its parsed file (read once)."""
    from ...jobspec.pipeline import load_pipeline
    from ...jobspec.project import find_job_file
    from ...jobspec.resolve import JobSource
    from ...jobspec.schema import is_pipeline
    from ...jobspec.yamlsrc import load_yaml

    path, shown = find_job_file(ref, root)
    located = load_yaml(path, shown)
    return load_pipeline(located, path, root) if is_pipeline(located.data) else JobSource.of_file(path, located)


def _sets_by_step(pipeline: Pipeline, sets: tuple[str, ...]) -> dict[str, list[str]]:
    """--set STEP.KEY.PATH=VALUE → {step: [KEY.PATH=VALUE]}: a pipeline's steps take different args."""
    names = pipeline.step_names()
    out: dict[str, list[str]] = {name: [] for name in names}
    for item in sets:
        key, _, rest = item.partition("=")
        step, dot, path = key.strip().partition(".")
        if step not in out or not dot:
            raise BadInput(f"--set {key.strip()}=...: in a pipeline, --set takes STEP.KEY.PATH=VALUE with a step of "
                           f"{pipeline.shown} ({', '.join(names)}), e.g. --set {names[-1]}.args.epochs=1")
        out[step].append(f"{path}={rest}")
    return out


def _reused(from_step: str, earlier_id: str, names: list[str], storage_root: str | None) -> dict[str, RunRecord]:
    """The runs of pipeline run ``earlier_id``'s steps before ``from_step``, each of which must have succeeded."""
    from ..memory import find

    record = find(earlier_id, storage_root)
    if record is None or not record.steps:
        raise BadInput(f"--from {from_step} {earlier_id}: no pipeline run {earlier_id} in the run ledger or the "
                       "project's storage (rtjob runs lists what is)")
    recorded = {s.get("name"): s for s in record.steps}
    out: dict[str, RunRecord] = {}
    for name in names[: names.index(from_step)]:
        entry = recorded.get(name)
        run = find(str(entry["run_id"]), storage_root) if entry and entry.get("run_id") else None
        if run is None or run.run_status != RunStatus.SUCCEEDED:
            state = run.status if run is not None else "never run"
            raise BadInput(f"--from {from_step} {earlier_id}: step {name} of {earlier_id} did not succeed ({state}); "
                           f"start from it instead: --from {name} {earlier_id}")
        out[name] = run
    return out


def plan(pipeline: Pipeline, settings: Settings, overrides: Overrides, storage_flag: str | None,
         resume: tuple[str, str] | None = None) -> PipelinePlan:
    """Every step planned (the request it will send, its run id and storage), or reused (``resume``: (STEP, ID)).
    Pure, like runner.plan: nothing is started or sent."""
    from ...backends import get_backend
    from ...jobspec.resolve import JobSource, Overrides, new_run_id
    from .. import runner

    if overrides.name:
        raise BadInput("--name: a pipeline's steps are named <pipeline>-<step>; rename the pipeline in its file")
    names = pipeline.step_names()
    pipeline_id = (check_run_id(overrides.submission_id, "--submission-id") if overrides.submission_id
                   else new_run_id(pipeline.name))
    reused: dict[str, RunRecord] = {}
    if resume is not None:
        from_step, earlier_id = resume
        pipeline.index(from_step, "--from")
        if earlier_id == pipeline_id:
            raise BadInput(f"--from {from_step} {earlier_id}: the new pipeline run needs another id than "
                           f"--submission-id {earlier_id}")
        from ..places import storage_root

        reused = _reused(from_step, earlier_id, names, storage_root(settings, storage_flag))
    sets = _sets_by_step(pipeline, overrides.sets)
    steps: list[StepPlan] = []
    for step in pipeline.steps:
        done_before = {s.name: s.storage_uri for s in steps if s.storage_uri}
        if step.name in reused:
            run = reused[step.name]
            steps.append(StepPlan(step.name, run.id, run.storage_uri, None, reused_from=resume[1] if resume else None))
            continue
        env = [f"{contract.ENV_PIPELINE_ID}={pipeline_id}", f"{contract.ENV_STEP_NAME}={step.name}"]
        if steps:
            env.append(f"{contract.ENV_INPUT_URI}={steps[-1].storage_uri}")
            env.append(f"{contract.ENV_STEP_URIS}={json.dumps(done_before, separators=(',', ':'))}")
        step_overrides = Overrides(
            nodes=None if step.declares_nodes else overrides.nodes, sets=tuple(sets[step.name]),
            env=(*overrides.env, *env), submission_id=f"{pipeline_id}-{step.name}",
            forward_aws_credentials=overrides.forward_aws_credentials, real_shape=overrides.real_shape)
        source = JobSource(path=step.path, job_file=step.shown, shown=step.shown, document=step.document)
        planned = runner.plan(step.job_name, settings, step_overrides, storage_flag, source=source)
        planned.pipeline = pipeline_id
        if planned.job.storage_uri is None:
            raise BadInput(f"{pipeline.shown}: a pipeline hands each step's run folder to the next, so it needs "
                           "storage: --storage s3://bucket/prefix, RTJOB_STORAGE or [tool.rtjob] storage")
        steps.append(StepPlan(step.name, planned.job.run_id, planned.job.storage_uri, planned))
    first = next(s.plan for s in steps if s.plan is not None) if any(s.plan for s in steps) else None
    backend = first.backend if first is not None else get_backend(settings)
    backend.check_pipeline([s.plan.request for s in steps if s.plan is not None], pipeline.shown)
    root = first.job.storage_root if first is not None else None
    return PipelinePlan(
        id=pipeline_id, pipeline=pipeline, backend=backend, settings=settings, steps=steps,
        storage_uri=f"{root}/{pipeline.name}/{pipeline_id}" if root else None,
        storage_endpoint=first.job.storage_endpoint if first is not None else None)


# -- the pipeline run's own record ---------------------------------------------------------------------------


def new_record(pp: PipelinePlan) -> RunRecord:
    """The pipeline run's record: its steps' run ids and folders in order (no request: each step has its own)."""
    from ...core.redact import mask_url
    from ..records import git_state, new_record_identity

    pipeline = pp.pipeline
    return RunRecord(address=mask_url(pp.backend.address),
        id=pp.id, job=pipeline.name, backend=pp.backend.name, status=RunStatus.PENDING.value,
        storage_uri=pp.storage_uri, storage_endpoint=pp.storage_endpoint, job_file=pipeline.shown,
        project_root=str(pp.settings.root),
        spec={"pipeline": pipeline.name, "job_path": str(pipeline.path.resolve()), "steps": pipeline.step_names()},
        git=git_state(pipeline.path.resolve().parent), steps=[s.to_json() for s in pp.steps],
        **new_record_identity(),
    )


def record_progress(record: RunRecord, statuses: list[RunStatus | None], events: RunEvents,
                    ended: RunStatus | None = None, reopen: bool = False) -> None:
    """The pipeline run's status, from its steps' (or ``ended``: as its supervisor recorded it), written as the
    kernel's transitions by this client: ``submitted`` (a new pipeline run), ``progressed`` (PENDING, RUNNING;
    ``reopen``: a submit of the same id goes on after its end), ``archived`` at its end. An end already recorded
    stands (``record`` then holds it)."""
    from ...core import lifecycle
    from ...core.lifecycle import Writer
    from ..memory import write

    status = ended or overall(statuses)
    if record.updated_at is not None and record.status == status.value and record.archived == status.terminal:
        return

    change = ([lifecycle.Archived(status, lifecycle.Archive(), record.message, by=Writer.FOLLOWER)]
              if status.terminal else
              [lifecycle.Submitted(by=Writer.FOLLOWER), lifecycle.Progressed(status, Writer.FOLLOWER, reopen=reopen)])
    write(record, change, events)


def find(run_id: str, storage_root: str | None) -> RunRecord | None:
    """The record of pipeline run ``run_id`` (None: no such run, or a plain run)."""
    from ..memory import find as find_record

    try:
        record = find_record(run_id, storage_root)
    except RtjobError:
        return None
    return record if record is not None and record.steps else None
