"""Pipelines at the command line: `submit`/`render` of a file with `steps:`, and `status`/`pull`/`results` of a
pipeline run's id (its steps, in order). The use cases are in runs/pipeline.py; this module prints."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..core.errors import EXIT_SUCCEEDED, WaitTimeout
from ..core.model import RunStatus
from .printing import duration, echo, follow_outcome, print_data, print_rich, run_json, say

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.model import RunInfo
    from ..core.record import RunRecord
    from ..jobspec.project import Settings
    from ..runs.pipeline import PipelinePlan


def render_pipeline(pp: PipelinePlan, settings: Settings, output: str, explain: bool) -> None:
    """Every step's request exactly as it will be sent (render and --dry-run of a pipeline)."""
    from ..backends.base import NotSupported
    from .render import print_render, render_data

    if output == "yaml":
        try:  # one job file per step for the backend's own CLI (anyscale job submit -f), where it has one
            docs = [f"# step {s.name}: run {s.run_id}\n" + (pp.backend.render_file(s.plan.request) if s.plan else
                                                               f"# reused from pipeline run {s.reused_from}\n")
                    for s in pp.steps]
            echo("---\n".join(docs), nl=False)
            return
        except NotSupported:
            pass
    if output != "text":
        steps = [{"name": s.name, "reused_from": s.reused_from,
                  **(render_data(s.plan, settings, explain) if s.plan else {"run_id": s.run_id,
                                                                            "storage_uri": s.storage_uri})}
                 for s in pp.steps]
        print_data({"pipeline": pp.to_json(), "steps": steps}, output)
        return
    echo("\n".join([
        f"pipeline:  {pp.pipeline.name}  ({pp.pipeline.shown})",
        f"run id:    {pp.id}  (step S runs as {pp.id}-S)",
        f"storage:   {pp.storage_uri or '-'}",
        f"steps:     {' -> '.join(pp.pipeline.step_names())}",
        "inputs:    each step gets RTJOB_INPUT_URI (the previous step's run folder) and RTJOB_STEP_URIS",
    ]))
    for i, step in enumerate(pp.steps, 1):
        echo(f"\n== step {i}/{len(pp.steps)}: {step.name} ==")
        if step.plan is None:
            echo(f"reused:    {step.run_id} of pipeline run {step.reused_from} ({step.storage_uri})")
        else:
            print_render(step.plan, settings, "text", explain)


def send_pipeline(pp: PipelinePlan, settings: Settings, *, output: str, dry_run: bool, explain: bool, no_wait: bool,
                  timeout_s: float | None, stop_on_interrupt: bool) -> int:
    """Run the steps one after another, each followed to its end; stop at the first that does not succeed and exit
    with its outcome. Steps that already succeeded under this pipeline id are not run again."""
    from ..runs import pipeline as pipelines
    from ..runs import runner
    from ..runs.history import find, remember_submitted

    if dry_run:
        render_pipeline(pp, settings, output, explain)
        return EXIT_SUCCEEDED
    record = pipelines.find(pp.id, None)
    if record is None:
        record = pipelines.new_record(pp)
        pipelines.record_progress(record, [None] * len(pp.steps), say)
    else:
        say(f"pipeline run {pp.id} exists: its steps that succeeded are not run again")
        record.steps = [s.to_json() for s in pp.steps]
    deadline = time.monotonic() + timeout_s if timeout_s else None
    statuses: list[RunStatus | None] = [None] * len(pp.steps)
    code = EXIT_SUCCEEDED
    for i, step in enumerate(pp.steps):
        known = find(step.run_id) if step.plan is not None else None
        if step.plan is None or (known is not None and known.run_status == RunStatus.SUCCEEDED):
            where = f"of pipeline run {step.reused_from}" if step.plan is None else "already"
            say(f"step {i + 1}/{len(pp.steps)} {step.name}: {step.run_id} {where} SUCCEEDED; not run again")
            statuses[i] = RunStatus.SUCCEEDED
            continue
        say(f"step {i + 1}/{len(pp.steps)} {step.name}: {step.run_id}")
        done = runner.submit(step.plan, attach=True, say=say)
        remember_submitted(step.plan, done.run, say)
        for note in step.plan.notes:
            say(f"note: {note}")
        verb = "submitted" if done.created else f"attaching to ({done.run.status.value})"
        say(f"{verb} {step.run_id} ({pp.backend.name}, {step.plan.job.shape_summary()}; storage {step.storage_uri})")
        statuses[i] = RunStatus.RUNNING
        pipelines.record_progress(record, statuses, say)
        if no_wait:
            say(f"pipeline {pp.id}: steps advance only while rtjob follows them; to go on: rtjob submit "
                f"{pp.pipeline.shown} --submission-id {pp.id}")
            break
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise WaitTimeout(f"pipeline {pp.id} is still running after the --timeout (step {step.name}, run "
                              f"{step.run_id}, left running)")
        code, info = follow_outcome(pp.backend, step.run_id, output, left, stop_on_interrupt, logs=True,
                                    request=step.plan.request, print_result=False)
        if info is None:  # detached: the step keeps running
            say(f"pipeline {pp.id} paused at step {step.name}; to go on: rtjob submit {pp.pipeline.shown} "
                f"--submission-id {pp.id}")
            return code
        statuses[i] = info.status
        pipelines.record_progress(record, statuses, say)
        if info.status != RunStatus.SUCCEEDED:
            later = pp.pipeline.step_names()[i:]
            say(f"pipeline {pp.id} stopped at step {step.name} ({info.status.value}); after a fix: rtjob submit "
                f"{pp.pipeline.shown} --from {later[0]} {pp.id}")
            break
    status = pipelines.overall(statuses)
    pipelines.record_progress(record, statuses, say)
    if not no_wait:
        say(f"pipeline {pp.id} {status.value} ({sum(s == RunStatus.SUCCEEDED for s in statuses)}/{len(statuses)} "
            "steps succeeded)")
    if output != "text":
        print_data({**pp.to_json(), "status": status.value,
                    "steps": [{**s.to_json(), "status": st.value if st else None}
                              for s, st in zip(pp.steps, statuses, strict=True)]}, output)
    elif no_wait:
        echo(pp.id)
    return code


def step_infos(be: Backend, record: RunRecord, storage_root: str | None) -> list[tuple[dict[str, Any], RunInfo | None]]:
    """Each step of a pipeline run as its backend (else its record) reports it; None: not submitted (yet)."""
    from ..core.errors import RtjobError
    from ..runs.history import lookup

    out: list[tuple[dict[str, Any], RunInfo | None]] = []
    for step in record.steps:
        try:
            info: RunInfo | None = lookup(be, str(step.get("run_id")), storage_root, None)[0]
        except RtjobError:
            info = None
        out.append((step, info))
    return out


def pipeline_status(be: Backend, record: RunRecord, storage_root: str | None, output: str) -> int:
    """`rtjob status PIPELINE_ID`: the pipeline run and each step's run."""
    from ..runs import pipeline as pipelines

    steps = step_infos(be, record, storage_root)
    status = pipelines.overall([info.status if info else None for _, info in steps])
    pipelines.record_progress(record, [info.status if info else None for _, info in steps], None)
    if output != "text":
        print_data({"id": record.id, "pipeline": record.job, "status": status.value,
                    "storage_uri": record.storage_uri,
                    "steps": [{"name": step.get("name"), "reused_from": step.get("reused_from"),
                               **(run_json(info) if info else {"id": step.get("run_id"), "status": None})}
                              for step, info in steps]}, output)
        return EXIT_SUCCEEDED
    from rich.table import Table

    echo(f"id:          {record.id}\npipeline:    {record.job} ({record.job_file or '-'})\nstatus:      "
         f"{status.value}\nstorage:     {record.storage_uri or '-'}")
    table = Table(box=None, header_style="bold")
    for column in ("STEP", "RUN ID", "STATUS", "DURATION", "STORAGE"):
        table.add_column(column, overflow="fold")
    for step, info in steps:
        reused = f" (from {step['reused_from']})" if step.get("reused_from") else ""
        table.add_row(str(step.get("name")), f"{step.get('run_id')}{reused}",
                      info.status.value if info else "not submitted", duration(info) if info else "-",
                      (info.storage_uri if info else step.get("storage_uri")) or "-")
    print_rich(table)
    return EXIT_SUCCEEDED


def pipeline_wait(be: Backend, record: RunRecord, storage_root: str | None, output: str,
                  timeout_s: float | None) -> int:
    """`rtjob wait PIPELINE_ID`: follow each submitted step that has not ended, in order, then exit with the pipeline
    run's outcome. Steps are submitted by a follower only: when the next step was never submitted, say so (exit 2)."""
    from ..core.errors import BadInput
    from ..runs import pipeline as pipelines

    deadline = time.monotonic() + timeout_s if timeout_s else None
    steps = step_infos(be, record, storage_root)
    statuses: list[RunStatus | None] = [info.status if info else None for _, info in steps]
    code = EXIT_SUCCEEDED
    for i, (_step, info) in enumerate(steps):
        if info is None or info.status.terminal:
            continue
        left = None if deadline is None else max(0.001, deadline - time.monotonic())
        code, ended = follow_outcome(be, info.id, output, left, False, logs=False, print_result=False)
        if ended is None:
            return code
        statuses[i] = ended.status
    status = pipelines.overall(statuses)
    pipelines.record_progress(record, statuses, say)
    if not status.terminal:
        waiting = next((str(s.get("name")) for (s, _), st in zip(steps, statuses, strict=True) if st is None), "?")
        raise BadInput(f"pipeline {record.id}: step {waiting} was never submitted (steps advance only while rtjob "
                       f"follows them): rtjob submit {record.job_file or record.job} --submission-id {record.id}")
    say(f"pipeline {record.id} {status.value}")
    if output != "text":
        print_data({"id": record.id, "pipeline": record.job, "status": status.value,
                    "steps": [{"name": s.get("name"), "run_id": s.get("run_id"), "status": st.value if st else None}
                              for (s, _), st in zip(steps, statuses, strict=True)]}, output)
    return EXIT_SUCCEEDED if status == RunStatus.SUCCEEDED else max(code, 1)


def pipeline_logs(be: Backend, record: RunRecord, storage_root: str | None, tail_lines: int | None) -> int:
    """`rtjob logs PIPELINE_ID`: each step's log in order, under a header naming the step and its run."""
    from ..backends.base import last_lines
    from ..core.errors import RtjobError
    from ..core.redact import redact
    from ..runs.history import archived_log, lookup

    for step in record.steps:
        run_id = str(step.get("run_id"))
        echo(f"== step {step.get('name')}: {run_id} ==")
        try:
            info, recorded = lookup(be, run_id, storage_root, None)
            if recorded is not None:
                text = archived_log(recorded)
                text = last_lines(text, tail_lines) if tail_lines else text
            else:
                text = be.last_lines(run_id, tail_lines) if tail_lines else be.logs(run_id)
        except RtjobError as exc:
            echo(f"(no log: {exc.message})")
            continue
        echo(redact(text, info.secrets), nl=not text.endswith("\n"))
    return EXIT_SUCCEEDED
