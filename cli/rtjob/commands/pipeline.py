"""Pipelines at the command line: `submit`/`render` of a file with `steps:`, and `status`/`pull`/`results` of a
pipeline run's id (its steps, in order). The use cases are in runs/pipelines/pipeline.py and runs/pipelines/steps.py; this module
prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import EXIT_FAILED, EXIT_SUCCEEDED
from ..core.model import RunStatus, stamp
from .events import PRINTED, finish, followed_error, log_stream, print_log
from .printing import duration, echo, print_data, print_rich, run_json, say

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.model import RunInfo
    from ..core.record import RunRecord
    from ..core.verdict import Verdict
    from ..jobspec.settings import Settings
    from ..runs.lifecycle.follow import Followed
    from ..runs.lifecycle.supervisor_state import SupervisorState
    from ..runs.pipelines.pipeline import PipelinePlan


def render_pipeline(pp: PipelinePlan, settings: Settings, output: str, explain: bool) -> None:
    """Every step's request exactly as it will be sent (render and --dry-run of a pipeline)."""
    from ..backends.base import NotSupported
    from .render import print_render, render_data

    planned = [s.plan.request for s in pp.steps if s.plan is not None]
    if output == "yaml" and pp.backend.pipeline_steps_inside:  # one job file: the steps are inside it
        echo(pp.backend.pipeline_file(pp.id, pp.storage_uri, pp.pipeline.name, planned), nl=False)
        return
    if output == "yaml":
        try:  # one job file per step for the backend's own CLI (anyscale job submit -f), where it has one
            docs = [f"# step {s.name}: run {s.run_id}\n" + (pp.backend.render_file(s.plan.request) if s.plan else
                                                               f"# reused from pipeline run {s.reused_from}\n")
                    for s in pp.steps]
            echo("---\n".join(docs), nl=False)
            return
        except NotSupported:
            pass
    supervisor = pp.backend.pipeline_supervisor_preview(pp.id, pp.storage_uri, pp.pipeline.name, planned)
    if output != "text":
        steps = [{"name": s.name, "reused_from": s.reused_from,
                  **(render_data(s.plan, settings, explain) if s.plan else {"run_id": s.run_id,
                                                                            "storage_uri": s.storage_uri})}
                 for s in pp.steps]
        print_data({"pipeline": pp.to_json(), "steps": steps,
                    **({"supervisor": supervisor} if supervisor else {})}, output)
        return
    echo("\n".join([
        f"pipeline:  {pp.pipeline.name}  ({pp.pipeline.shown})",
        f"run id:    {pp.id}  (step S runs as {pp.id}-S)",
        f"storage:   {pp.storage_uri or '-'}",
        f"steps:     {' -> '.join(pp.pipeline.step_names())}",
        "inputs:    each step gets RTJOB_INPUT_URI (the previous step's run folder), RTJOB_INPUT_DIR (the same, "
        "a local folder) and RTJOB_STEP_URIS",
    ]))
    for i, step in enumerate(pp.steps, 1):
        echo(f"\n== step {i}/{len(pp.steps)}: {step.name} ==")
        if step.plan is None:
            echo(f"reused:    {step.run_id} of pipeline run {step.reused_from} ({step.storage_uri})")
        else:
            print_render(step.plan, settings, "text", explain)
    if supervisor is not None and pp.backend.pipeline_steps_inside:
        echo(f"\n== what is sent: one job, {pp.id}-supervisor, whose driver (the supervisor) runs each step above as "
             "a Ray job on its cluster (their requests are inside it) ==")
        print_data(supervisor, "json")
    elif supervisor is not None:
        echo(f"\n== supervisor: {pp.id}-supervisor runs the steps on the cluster ==\n"
             "(submit uploads each step's packages first: their gcs:// URIs replace the local paths shown)")
        print_data(supervisor, "json")


def send_pipeline(pp: PipelinePlan, settings: Settings, *, output: str, dry_run: bool, explain: bool, no_wait: bool,
                  timeout_s: float | None, stop_on_interrupt: bool) -> int:
    """Run the steps one after another (runs/pipelines/steps.py) and print the pipeline run's outcome; exit with the last
    followed step's outcome."""
    from ..runs.pipelines.steps import run_steps

    if dry_run:
        render_pipeline(pp, settings, output, explain)
        return EXIT_SUCCEEDED
    done = run_steps(pp, PRINTED, out=log_stream(output), no_wait=no_wait, timeout_s=timeout_s,
                     stop_on_interrupt=stop_on_interrupt)
    status, statuses = done.status, done.statuses
    if not no_wait and not done.unfinished:
        say(f"pipeline {pp.id} {status.value} ({sum(s == RunStatus.SUCCEEDED for s in statuses)}/{len(statuses)} "
            "steps succeeded)")
    if output != "text":
        print_data({**pp.to_json(), "status": status.value,
                    "steps": [{**s.to_json(), "status": st.value if st else None}
                              for s, st in zip(pp.steps, statuses, strict=True)], **_error(done.last)}, output)
    elif no_wait:
        echo(pp.id)
    if done.last is None and not no_wait:  # no step followed here: the end its supervisor recorded decides
        return EXIT_SUCCEEDED if status == RunStatus.SUCCEEDED else EXIT_FAILED
    return finish(done.last)


def _error(followed: Followed | None) -> dict[str, str]:
    """The ``error`` of a pipeline's document when rtjob stopped following before its end."""
    error = followed_error(followed)
    return {"error": error} if error else {}


def carrier_line(carrier: SupervisorState, run: RunStatus) -> str:
    """Its supervisor: alive, or how it ended; one that ended well with a FAILED or STOPPED run ended with the run
    (its job's SUCCEEDED says how the supervisor's process ended, not how the run did)."""
    if carrier.alive or not run.terminal or run == RunStatus.SUCCEEDED or carrier.status != "SUCCEEDED":
        return carrier.describe()
    seen = f", last seen {stamp(carrier.last_seen)}" if carrier.last_seen else ""
    return f"supervisor (ended with the run{seen})"


def judged_json(record: RunRecord, judged: Verdict) -> dict[str, Any]:
    """The head of every -o json document of a pipeline run (status, wait, stop): its id, its pipeline, and its
    status, times and whole verdict as every view says them."""
    return {"id": record.id, "pipeline": record.job, "status": judged.status.value, "verdict": judged.to_json(),
            "start_time": judged.started, "end_time": judged.ended}


def steps_json(steps: list[dict[str, Any]], statuses: list[RunStatus | None]) -> list[dict[str, Any]]:
    """Each step of a pipeline run's `wait` document: its name, its run and that run's status (None: not run)."""
    return [{"name": step.get("name"), "run_id": step.get("run_id"), "status": status.value if status else None}
            for step, status in zip(steps, statuses, strict=True)]


def pipeline_status(be: Backend, record: RunRecord, storage_root: str | None, output: str, repair: bool) -> int:
    """`rtjob status PIPELINE_ID`: the pipeline run and each step's run (from their records once its cluster is
    gone). A supervisor that died before the pipeline ended is reported; ``repair``: replaced (exactly once:
    deterministic ids)."""
    import dataclasses

    from ..runs.lifecycle.supervisor_state import supervisor_state
    from ..runs.pipelines.steps import pipeline_state

    steps, judged = pipeline_state(be, record, storage_root, carry=repair)  # a recorded end stands
    status = judged.status
    carrier = supervisor_state(be, dataclasses.replace(record.to_run_info(), status=status),
                         PRINTED.note if repair else None)
    if carrier is not None and not carrier.alive and not status.terminal and not repair:
        say(f"warning: its supervisor {carrier.id} is {carrier.status} and nothing carries the pipeline now: rtjob "
            f"status {record.id} --repair (or rtjob wait {record.id}) starts a new one")
    current = next((str(step.get("name")) for step, info in steps if info is None or not info.status.terminal), None)
    span = judged.onto(record.to_run_info())
    if output != "text":
        print_data({**judged_json(record, judged), "storage_uri": record.storage_uri,
                    "current_step": None if status.terminal else current,
                    **(carrier.to_json() if carrier else {}),
                    "steps": [{"name": step.get("name"), "reused_from": step.get("reused_from"),
                               **(run_json(info) if info else {"id": step.get("run_id"), "status": None})}
                              for step, info in steps]}, output)
        return EXIT_SUCCEEDED
    from rich.table import Table

    echo(f"id:          {record.id}\npipeline:    {record.job} ({record.job_file or '-'})\nstatus:      "
         f"{status.value}\nstarted:     {stamp(span.start_time)}\nended:       {stamp(span.end_time)}\n"
         f"duration:    {duration(span)}\nstorage:     {record.storage_uri or '-'}")
    if carrier is not None:
        echo(f"carried by:  {carrier_line(carrier, status)}" + ("" if status.terminal or current is None else
                                                                 f", at step {current}"))
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
                  timeout_s: float | None, info: RunInfo) -> int:
    """`rtjob wait PIPELINE_ID`: its submitted steps followed to their ends (runs/pipelines/steps.py), then the pipeline
    run's outcome; a pipeline whose end is recorded (``info``: the view of it) answers from its records."""
    from ..runs.pipelines.pipeline import find
    from ..runs.pipelines.steps import pipeline_state, wait_steps

    if info.status.terminal:
        steps, judged = pipeline_state(be, record, storage_root)
        say(f"pipeline {record.id} {judged.status.value} (from the run record)")
    else:
        waited, done = wait_steps(be, record, storage_root, PRINTED, timeout_s)
        if done.unfinished:  # rtjob stopped following (--timeout, the cluster gone): the steps as last seen
            if output != "text":
                print_data({"id": record.id, "pipeline": record.job, "status": done.status.value,
                            "steps": steps_json(waited, done.statuses), **_error(done.last)}, output)
            return finish(done.last)
        # its end as recorded now (this wait's, or the one that stands): what status and every view say
        steps, judged = pipeline_state(be, find(record.id, storage_root) or record, storage_root)
        say(f"pipeline {record.id} {judged.status.value}")
    if output != "text":
        print_data({**judged_json(record, judged), "steps": steps_json([step for step, _ in steps],
                                                                     [i.status if i else None for _, i in steps])},
                   output)
    return EXIT_SUCCEEDED if judged.status == RunStatus.SUCCEEDED else EXIT_FAILED


def pipeline_stop(be: Backend, record: RunRecord, storage_root: str | None, output: str) -> int:
    """`rtjob stop PIPELINE_ID`: its supervisor and the step running now stopped, then its final state as `status`
    reads it (written to its record: a stop carries the run)."""
    from ..runs.lifecycle.stopping import stop_pipeline
    from ..runs.pipelines.steps import pipeline_state

    stopped = stop_pipeline(be, record)
    for one in stopped:
        say(f"{one.id}: {one.status.value}")
    steps, final = pipeline_state(be, record, storage_root, carry=True)
    if output != "text":
        print_data({**judged_json(record, final), "stopped": [run_json(one) for one in stopped],
                    "steps": [{"name": step.get("name"), "id": step.get("run_id"),
                               "status": info.status.value if info else None} for step, info in steps]}, output)
    else:
        say(f"{record.id}: {final.status.value} (steps: " + ", ".join(
            f"{step.get('name')} {info.status.value if info else 'not run'}" for step, info in steps) + ")")
    return EXIT_SUCCEEDED


def pipeline_logs(be: Backend, record: RunRecord, storage_root: str | None, tail_lines: int | None,
                  raw: bool = False) -> int:
    """`rtjob logs PIPELINE_ID`: each step's log in order, under a header naming the step and its run."""
    from ..core.errors import RtjobError
    from ..runs.events import Quiet
    from ..runs.lifecycle.archive import archived_log
    from ..runs.logview import lines_to_read
    from ..runs.view import look

    read_lines = lines_to_read(tail_lines, raw)

    for step in record.steps:
        run_id = str(step.get("run_id"))
        echo(f"== step {step.get('name')}: {run_id} ==")
        try:
            view = look(be, run_id, storage_root, Quiet())
            info, latest = view.info, view.latest  # a retried step's log: its latest attempt's
            if view.record is not None:
                chunks = list(archived_log(view.record, read_lines))
            else:
                chunks = [be.last_lines(latest, read_lines) if read_lines else be.logs(latest)]
        except RtjobError as exc:
            echo(f"(no log: {exc.message})")
            continue
        print_log(chunks, info.secrets, tail_lines, raw)
        if chunks and not chunks[-1].endswith("\n"):
            echo("")
    return EXIT_SUCCEEDED
