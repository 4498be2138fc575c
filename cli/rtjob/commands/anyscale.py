"""`rtjob compute-config ...` and `rtjob schedule ...`: compute configs registered with a platform and schedules
kept by one (the capabilities of the backend the registry names: Anyscale's), and GitHub Actions workflows for
scheduled runs. Only click is imported here; the rest when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..backends import WITH_ADDRESS
from ..core.errors import EXIT_SUCCEEDED, BadInput
from .options import CONTEXT, BackendChoice, complete_compute_config, complete_job, output_option
from .printing import echo, print_data, print_json, print_rich
from .printing import say as _say

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..backends.capabilities import ComputeConfigs, Schedules
    from ..jobspec.pipeline import Pipeline
    from ..jobspec.pricing import HourlyCost
    from ..jobspec.settings import Settings


def _offering(capability: str) -> Backend:
    """The backend the registry names for ``capability``, with its settings (context, project, environment)."""
    from ..backends import configured, get_backend, offering

    return get_backend(configured({"backend": offering(capability)}))


def _compute_configs() -> ComputeConfigs:
    from ..backends.base import NotSupported

    backend = _offering("compute_configs")
    found = backend.compute_configs()
    if found is None:  # offering() found the method overridden: only a backend that breaks its contract
        raise NotSupported(f"backend {backend.name!r} keeps no compute configs")
    return found


def _schedules(backend: Backend | None = None) -> Schedules:
    from ..backends.base import NotSupported

    backend = backend or _offering("schedules")
    found = backend.schedules()
    if found is None:
        raise NotSupported(f"backend {backend.name!r} keeps no schedules")
    return found


def _print_yaml(data: dict[str, Any], header: list[str]) -> None:
    from ..core.yamlout import dump_yaml

    echo("\n".join(f"# {line}" for line in header))
    echo(dump_yaml(data, allow_unicode=False), nl=False)


# ---------------------------------------------------------------------------------------------
# compute configs


def _local_compute_config(configs: ComputeConfigs, name: str, nodes: int | None,
                          group_name: str | None) -> tuple[dict[str, Any], str, str]:
    """(Anyscale-shaped config, file shown, what was pinned) for compute_configs/NAME.yaml or a path."""
    from ..jobspec.pricing import pinned_compute_config
    from ..jobspec.project import find_root
    from ..jobspec.resolve import load_compute_config, pick_group

    cc, shown = load_compute_config(name, find_root())
    if nodes is None and group_name is None:
        data, pinned = cc.model_dump(exclude_none=True), ""
    else:
        group = pick_group(cc, group_name, shown)
        if group is None:
            raise BadInput(f"{shown}: --nodes needs a worker group to pin, and this compute config has none")
        count = nodes if nodes is not None else group.min_nodes
        data, pinned = pinned_compute_config(cc, group, count), f"{group.label} pinned to {count} node(s)"
    return configs.with_defaults(data), shown, pinned


@click.group("compute-config", context_settings=CONTEXT)
def compute_config_group() -> None:
    """Compute configs (compute_configs/*.yaml, Anyscale's schema): show them with their cost, register
    them with Anyscale. A registered one is used as --compute-config anyscale:NAME[:VERSION].

    \b
    Examples:
      rtjob compute-config show g5-4xlarge --nodes 2
      rtjob compute-config apply g5-4xlarge --name team-g5
    """


@compute_config_group.command("show")
@click.argument("name", shell_complete=complete_compute_config)
@click.option("--nodes", type=click.IntRange(1, 1000), help="Pin the GPU worker group to N nodes (min = max = N).")
@click.option("--group", "group_name", help="The worker group --nodes pins (default: the first GPU group).")
@click.option("--output", "-o", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="yaml: the config as a file Anyscale accepts, cost and source as comments; json: all as data.")
def compute_config_show(name: str, nodes: int | None, group_name: str | None, output: str) -> int:
    """Print compute config NAME as Anyscale receives it, with its estimated cost per hour.

    NAME is compute_configs/NAME.yaml (or a path); anyscale:NAME[:VERSION] reads a registered one.

    \b
    Examples:
      rtjob compute-config show g5-4xlarge
      rtjob compute-config show g5-4xlarge --nodes 4 -o json
      rtjob compute-config show anyscale:team-g5:2
    """
    from ..jobspec.pricing import compute_config_cost

    configs = _compute_configs()
    if name.startswith(configs.prefix):
        if nodes is not None or group_name:
            raise BadInput(f"{name}: a registered compute config is shown as registered (no --nodes/--group)")
        data, shown, pinned = configs.registered(name[len(configs.prefix):]), name, ""
        checked = None
    else:
        data, shown, pinned = _local_compute_config(configs, name, nodes, group_name)
        checked = configs.check(data, shown)
    cost = compute_config_cost(data)
    if output == "json":
        print_json({"name": name, "source": shown, "pinned": pinned or None, "compute_config": data,
                    "cost": cost.to_json() if cost else None, "checked_with": checked})
        return EXIT_SUCCEEDED
    header = [f"compute config {name} ({shown}){', ' + pinned if pinned else ''}"]
    if cost:
        header.append(f"cost: {cost.text()}")
    if checked:
        header.append(f"checked with {checked}")
    _print_yaml(data, header)
    return EXIT_SUCCEEDED


@compute_config_group.command("apply")
@click.argument("name", shell_complete=complete_compute_config)
@click.option("--name", "registered_name", help="Name to register it under (default: NAME's file name).")
@click.option("--nodes", type=click.IntRange(1, 1000), help="Pin the GPU worker group to N nodes first.")
@click.option("--group", "group_name", help="The worker group --nodes pins (default: the first GPU group).")
def compute_config_apply(name: str, registered_name: str | None, nodes: int | None, group_name: str | None) -> int:
    """Register compute config NAME with Anyscale (a new version if the name exists); print its name.

    \b
    Examples:
      rtjob compute-config apply g5-4xlarge
      rtjob compute-config apply g5-4xlarge --nodes 2 --name g5-pinned
    """
    from pathlib import Path

    from ..jobspec.pricing import compute_config_cost

    configs = _compute_configs()
    data, shown, pinned = _local_compute_config(configs, name, nodes, group_name)
    configs.check(data, shown)
    target = registered_name or Path(name).stem
    full_name = configs.register(data, target)
    cost = compute_config_cost(data)
    _say(f"registered {shown}{' (' + pinned + ')' if pinned else ''} as {full_name}; "
         f"use it with --compute-config {configs.prefix}{full_name}")
    if cost:
        _say(f"cost: {cost.text()}")
    echo(full_name)
    return EXIT_SUCCEEDED


# ---------------------------------------------------------------------------------------------
# schedules


def _schedule_job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.argument("job", shell_complete=complete_job),
        click.option("--cron", required=True, help="When to run: 5 cron fields, e.g. '0 3 * * 1' (Mondays 03:00)."),
        click.option("--timezone", default="UTC", show_default=True, help="Time zone of --cron: UTC, local or an IANA name (--github: an IANA name)."),
        click.option("--name", help="Schedule name (default: the job's name); apply updates a schedule of this name."),
        click.option("--nodes", type=click.IntRange(1, 1000), help="Nodes of the job's worker group."),
        click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help="Override a job field."),
        click.option("--env", "envs", multiple=True, metavar="NAME=VALUE", help="Add or override an environment variable."),
        click.option("--storage", help="Where runs write checkpoints: s3://bucket/prefix."),
        click.option("--compute-config", shell_complete=complete_compute_config,
                     help="Compute config name (compute_configs/NAME.yaml), path or anyscale:NAME."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


@dataclass
class _Scheduled:
    """What a schedule runs, as its commands print it: a job, or a pipeline (one job whose driver runs its steps)."""

    name: str
    job_file: str
    shape: str
    cost: HourlyCost | None
    notes: list[str]


def _planned_schedule(job: str, cron: str, timezone: str, name: str | None, nodes: int | None,
                      sets: tuple[str, ...], envs: tuple[str, ...], storage: str | None,
                      compute_config: str | None) -> tuple[Schedules, _Scheduled, dict[str, Any], str, str | None]:
    """Checks first (cron, time zone: nothing is resolved or sent with a bad one), then the schedule."""
    from ..backends import configured, offering
    from ..core.model import check_run_id
    from ..jobspec.cron import validate_cron, validate_timezone
    from ..jobspec.pipeline import Pipeline
    from ..jobspec.project import project_of
    from ..jobspec.resolve import Overrides
    from ..runs.pipelines.pipeline import load
    from ..runs.runner import plan

    cron = validate_cron(cron)
    timezone = validate_timezone(timezone)
    if name is not None:  # pasted into the schedule's shell entrypoint and Anyscale's names
        check_run_id(name, "--name")
    root = project_of(job)
    settings = configured({"backend": offering("schedules"), "storage": storage, "compute_config": compute_config},
                          root)
    loaded = load(job, root)
    if isinstance(loaded, Pipeline):  # one job per run, its driver the pipeline's supervisor
        return _planned_pipeline_schedule(loaded, settings, cron, timezone, name, nodes, sets, envs, storage)
    planned = plan(job, settings, Overrides(nodes=nodes, sets=sets, env=envs), storage_flag=storage, source=loaded)
    schedules = _schedules(planned.backend)
    schedule_name = name or planned.job.spec.name
    schedule = schedules.build(planned.request, schedule_name, cron, timezone)
    checked = schedules.check(schedule, planned.job.job_file)
    what = _Scheduled(planned.job.spec.name, planned.job.job_file, planned.job.shape_summary(), planned.cost,
                      planned.notes)
    return schedules, what, schedule, schedule_name, checked


def _planned_pipeline_schedule(pipeline: Pipeline, settings: Settings, cron: str, timezone: str, name: str | None,
                               nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...],
                               storage: str | None) -> tuple[Schedules, _Scheduled, dict[str, Any], str, str | None]:
    from ..jobspec.pricing import compute_config_cost
    from ..jobspec.resolve import Overrides
    from ..runs.pipelines.pipeline import plan as plan_pipeline

    schedule_name = name or pipeline.name
    planned_id = f"rtjob-{schedule_name}-planned"  # each run replaces it with its own job id
    pp = plan_pipeline(pipeline, settings, Overrides(nodes=nodes, sets=sets, env=envs, submission_id=planned_id),
                       storage)
    schedules = _schedules(pp.backend)
    requests = [s.plan.request for s in pp.steps if s.plan is not None]
    schedule = schedules.build_pipeline(planned_id, pp.storage_uri, pipeline.name, requests, schedule_name, cron,
                                        timezone)
    checked = schedules.check(schedule, pipeline.shown)
    names = " -> ".join(pipeline.step_names())
    what = _Scheduled(pipeline.name, pipeline.shown, f"pipeline {names}: one job whose driver runs each step on its "
                      "cluster", compute_config_cost(schedule["job_config"].get("compute_config")),
                      [note for s in pp.steps if s.plan is not None for note in s.plan.notes
                       if "timeout_s" not in note])
    return schedules, what, schedule, schedule_name, checked


def _print_schedule(schedules: Schedules, planned: _Scheduled, schedule: dict[str, Any], name: str,
                    checked: str | None, output: str) -> None:
    from ..jobspec.cron import next_runs

    cost = planned.cost
    upcoming = next_runs(schedule["cron_expression"], schedule["timezone"])
    if output != "text":
        print_data({"name": name, "schedule": schedules.masked(schedule), "next_runs": upcoming,
                    "cost": cost.to_json() if cost else None, "checked_with": checked, "notes": planned.notes},
                   output)
        return
    header = [
        f"schedule {name}: cron '{schedule['cron_expression']}' ({schedule['timezone']}); next: {', '.join(upcoming)}",
        f"job {planned.name} ({planned.job_file}): {planned.shape}",
    ]
    if cost:
        header.append(f"cost per hour of a run: {cost.text()}")
    header += [f"note: {note}" for note in dict.fromkeys(planned.notes)]
    if checked:
        header.append(f"checked with {checked}; `anyscale schedule apply -f FILE` accepts this file")
    _print_yaml(schedules.masked(schedule), header)


@click.group("schedule", context_settings=CONTEXT)
def schedule_group() -> None:
    """Scheduled runs: Anyscale schedules (apply, list, pause, resume, trigger, delete), and GitHub Actions
    workflows for Ray clusters (render --github).

    \b
    Examples:
      rtjob schedule apply ddp-resnet --cron '0 3 * * 1'
      rtjob schedule render ddp-resnet --cron '0 3 * * *' --github > .github/workflows/nightly.yml
      rtjob schedule list
    """


@schedule_group.command("apply")
@_schedule_job_options
@click.option("--dry-run", is_flag=True, help="Print the schedule Anyscale would get; send nothing.")
@output_option
def schedule_apply(job: str, cron: str, timezone: str, name: str | None, nodes: int | None, sets: tuple[str, ...],
                   envs: tuple[str, ...], storage: str | None, compute_config: str | None, dry_run: bool,
                   output: str) -> int:
    """Create or update the Anyscale schedule that runs JOB on --cron.

    \b
    Examples:
      rtjob schedule apply ddp-resnet --cron '0 3 * * 1' --timezone Europe/Berlin
      rtjob schedule apply ddp-resnet --cron '0 3 * * *' --dry-run -o json
    """
    from ..jobspec.cron import next_runs

    schedules, planned, schedule, schedule_name, checked = _planned_schedule(
        job, cron, timezone, name, nodes, sets, envs, storage, compute_config)
    if dry_run:
        _print_schedule(schedules, planned, schedule, schedule_name, checked, output)
        return EXIT_SUCCEEDED
    schedule_id = schedules.apply(schedule)
    upcoming = next_runs(schedule["cron_expression"], schedule["timezone"])
    if output != "text":
        print_data({"id": schedule_id, "name": schedule_name, "cron": schedule["cron_expression"],
                    "timezone": schedule["timezone"], "next_runs": upcoming}, output)
    else:
        _say(f"schedule {schedule_name} applied ({schedule_id}): {planned.name} at "
             f"'{schedule['cron_expression']}' {schedule['timezone']}; next {upcoming[0]}")
        echo(schedule_id)
    return EXIT_SUCCEEDED


@schedule_group.command("render")
@_schedule_job_options
@click.option("--github", is_flag=True, help="A GitHub Actions workflow (cron + manual trigger) instead.")
@click.option("--backend", type=BackendChoice(), default=WITH_ADDRESS, show_default=True,
              help="With --github: where the workflow submits (a cluster: not the embedded one).")
@click.option("--follow", is_flag=True,
              help="With --github: one job submits and follows the run to its end, holding its runner (default: "
                   "a short job submits with --no-wait; a check job, started by the run's `github` notification "
                   "or by hand, reads how it ended).")
@click.option("--timeout", default="2h", show_default=True, metavar="DURATION",
              help="With --github --follow: how long the workflow follows the job (rtjob submit --timeout).")
@click.option("--check-cron", metavar="CRON",
              help="With --github (not --follow): also start the check job on this cron; it checks the run the "
                   "workflow submitted last (found in RTJOB_STORAGE's run index): no notify token needed.")
@click.option("--out", "out", metavar="FILE",
              help="With --github: write the workflow to FILE (e.g. .github/workflows/train.yml) once every "
                   "check passed, instead of printing it; a refused one leaves FILE as it was.")
def schedule_render(job: str, cron: str, timezone: str, name: str | None, nodes: int | None, sets: tuple[str, ...],
                    envs: tuple[str, ...], storage: str | None, compute_config: str | None, github: bool,
                    backend: str, follow: bool, timeout: str, check_cron: str | None, out: str | None) -> int:
    """Print what would run JOB on --cron: the Anyscale schedule file (`anyscale schedule apply -f`), or
    with --github a workflow for .github/workflows/ that submits with rtjob and fails unless the job
    succeeds (for Ray-cluster users: --backend ray, the default). With --github, --cron is what GitHub
    runs (POSIX cron, at most every 5 minutes) in --timezone (an IANA name; GitHub's default is UTC).

    \b
    Examples:
      rtjob schedule render ddp-resnet --cron '0 3 * * 1' > schedule.yaml   # anyscale schedule apply -f
      rtjob schedule render ddp-resnet --cron '0 3 * * *' --github --timezone Europe/Berlin --out .github/workflows/train.yml
    """
    if follow and not github:
        raise BadInput("--follow shapes a --github workflow; an Anyscale schedule never holds a runner")
    if check_cron is not None and (follow or not github):
        raise BadInput("--check-cron starts the check job of an unattended --github workflow (not with --follow)")
    if out is not None and not github:
        raise BadInput("--out writes a --github workflow; the Anyscale schedule file is printed (redirect it)")
    if not github:
        schedules, planned, schedule, schedule_name, checked = _planned_schedule(
            job, cron, timezone, name, nodes, sets, envs, storage, compute_config)
        _print_schedule(schedules, planned, schedule, schedule_name, checked, "text")
        return EXIT_SUCCEEDED
    from ..backends import backend_class
    from ..jobspec.cron import validate_github_cron, validate_iana_timezone
    from ..jobspec.project import project_of
    from ..jobspec.resolve import JobSource, load_job_file
    from ..scaffold.workflow import github_workflow, write_workflow

    cron = validate_github_cron(cron)  # every check before anything is written
    timezone = validate_iana_timezone(timezone)
    if sets or envs or storage or compute_config or name:
        raise BadInput("--github renders `rtjob submit JOB --nodes N`: put other settings in the job file, "
                       "the workflow's env (RTJOB_STORAGE) or [tool.rtjob]")
    root = project_of(job)  # a job file's own project, wherever rtjob runs
    from ..runs.pipelines.pipeline import load

    loaded = load(job, root)  # the job (or pipeline) must exist and be valid
    if isinstance(loaded, JobSource):
        spec, shown = load_job_file(job, root)
        default_nodes = spec.nodes
    else:  # a pipeline: submit runs its steps; unattended, only where the cluster carries them
        shown, default_nodes = loaded.shown, 1
        if not follow and not backend_class(backend).carries_pipelines:
            raise BadInput(f"{shown}: on --backend {backend} a pipeline's steps advance only while rtjob follows "
                           "them: add --follow (the workflow follows the pipeline to its end)")
    ref = job if "/" not in job and not job.endswith((".yaml", ".yml")) else shown
    text = github_workflow(ref, cron, backend=backend, nodes=nodes or default_nodes, timeout=timeout,
                           timezone=timezone, root=root, follow=follow, check_cron=check_cron)
    if out is None:
        echo(text, nl=False)
        return EXIT_SUCCEEDED
    write_workflow(out, text)
    _say(f"wrote {out}: runs {ref} on '{cron}' ({timezone}) with --backend {backend}; commit it")
    return EXIT_SUCCEEDED


@schedule_group.command("list")
@output_option
def schedule_list(output: str) -> int:
    """List your Anyscale schedules.

    \b
    Examples:
      rtjob schedule list
      rtjob schedule list -o yaml
    """
    rows = _schedules().list()
    if output != "text":
        print_data(rows, output)
        return EXIT_SUCCEEDED
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("NAME", "STATE", "CRON", "TIMEZONE", "JOB", "ID"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["name"], row["state"], row["cron"], row["timezone"], row["job"] or "-", row["id"])
    print_rich(table)
    return EXIT_SUCCEEDED


def _schedule_action(command: str, doc: str, act: Callable[[Schedules, str], str], done: str) -> None:
    """``rtjob schedule COMMAND NAME``: one backend call on the schedule, then one line (``done``)."""

    examples = f"\n\n\b\nExamples:\n  rtjob schedule {command} ddp-resnet\n"
    @schedule_group.command(command, help=doc + examples)
    @click.argument("name")
    def action(name: str) -> int:
        schedule_id = act(_schedules(), name)
        _say(f"schedule {name} " + done.format(id=schedule_id))
        return EXIT_SUCCEEDED


_schedule_action("pause", "Pause schedule NAME (no new runs until resumed).",
                 lambda schedules, name: schedules.set_state(name, enabled=False), "paused ({id})")
_schedule_action("resume", "Resume schedule NAME.",
                 lambda schedules, name: schedules.set_state(name, enabled=True), "resumed ({id})")
_schedule_action("trigger", "Start a run of schedule NAME now (rtjob list --backend anyscale shows it).",
                 lambda schedules, name: schedules.trigger(name),
                 "triggered ({id}); rtjob list --backend anyscale shows the run")
_schedule_action("delete", "Delete schedule NAME (runs it started are kept).",
                 lambda schedules, name: schedules.delete(name), "deleted ({id})")
