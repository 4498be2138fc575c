"""The project's own files: `rtjob jobs`, `validate`, `schema`, `compute-config list`, `init`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..core.errors import EXIT_BAD_INPUT, EXIT_SUCCEEDED, BadInput, RtjobError
from .anyscale import compute_config_group
from .options import complete_job, output_option
from .printing import echo, print_data, print_json, print_rows


@click.command()
@output_option
def jobs(output: str) -> int:
    """List the named jobs of this project (jobs/*.yaml).

    \b
    Examples:
      rtjob jobs
      rtjob jobs -o yaml
    """
    from ..jobspec.pipeline import Pipeline
    from ..jobspec.project import find_root, job_file_of, job_names
    from ..jobspec.resolve import declares_shape
    from ..jobspec.schema import validate_job
    from ..jobspec.yamlsrc import Located
    from ..runs.pipelines.pipeline import load as load_pipeline

    root = find_root()
    rows: list[dict[str, Any]] = []

    for name in job_names(root):
        try:  # by its file: a `name:` elsewhere that equals this file name must not make it ambiguous here
            loaded = load_pipeline(str(job_file_of(name, root)), root)
            if isinstance(loaded, Pipeline):
                rows.append({"name": name, "description": loaded.description, "strategy": "pipeline", "nodes": None,
                             "compute_config": None, "file": loaded.shown, "error": None,
                             "steps": loaded.step_names()})
                continue
            spec, shown = validate_job(Located(loaded.document, loaded.shown, loaded.lines)), loaded.shown
            rows.append({"name": name, "description": spec.description, "strategy": spec.strategy,
                         # a job that declares no shape: its entrypoint decides (never an invented 1)
                         "nodes": spec.nodes if declares_shape(spec, spec.compute_config) else None,
                         "compute_config": spec.compute_config, "file": shown, "error": None})
        except RtjobError as exc:
            rows.append({"name": name, "description": "", "strategy": "-", "nodes": None, "compute_config": None,
                         "file": _job_file_shown(name, root), "error": exc.message})
    print_rows(rows, [("name", "JOB"), ("strategy", "STRATEGY"), ("nodes", "NODES"), ("compute_config", "COMPUTE"),
                      (_invalid_or("description"), "DESCRIPTION")], output)
    return EXIT_SUCCEEDED


def _invalid_or(key: str) -> Callable[[dict[str, Any]], Any]:
    """A table cell: the row's ``key``, or 'INVALID: <why>' for a file that does not load."""
    return lambda row: f"INVALID: {row['error']}" if row["error"] else row[key]


def _job_file_shown(name: str, root: Any) -> str:
    from ..jobspec.project import find_job_file, job_file_of

    return find_job_file(str(job_file_of(name, root)), root)[1]


@click.command()
@click.argument("refs", nargs=-1, metavar="[JOB...]", shell_complete=complete_job)
@output_option
def validate(refs: tuple[str, ...], output: str) -> int:
    """Validate the given jobs, or every shipped job and compute config (exit 2 on any error).

    \b
    Examples:
      rtjob validate
      rtjob validate ddp-resnet jobs/my-job.yaml
      rtjob validate -o json
    """
    from ..backends import registered_compute_configs
    from ..jobspec.project import compute_config_names, find_root, job_names, project_of
    from ..jobspec.requirements import cluster_problems, declared_at, requirement_lines
    from ..jobspec.resolve import Overrides, load_compute_config, load_job

    root = find_root()
    checked: list[dict[str, Any]] = []  # {kind, ref, file, ok, error[, warning]}, in the order checked
    targets = list(refs) or job_names(root)
    from ..jobspec.pipeline import Pipeline
    from ..jobspec.resolve import JobSource
    from ..runs.pipelines.pipeline import load as load_pipeline

    for ref in targets:
        try:
            loaded = load_pipeline(ref, root)
            pipeline = loaded if isinstance(loaded, Pipeline) else None
            # A pipeline: each step as the job it runs (its compute config, its requirements file).
            jobs: list[tuple[str, JobSource]] = [
                (step.job_name, JobSource(step.path, step.shown, step.shown, step.document)) for step in loaded.steps
            ] if isinstance(loaded, Pipeline) else [(ref, loaded)]
            warnings = []
            for job_ref, source in jobs:
                spec, shown = load_job(job_ref, root, Overrides(), local_profile=True, source=source)
                registered = spec.compute_config and any(  # kept by a platform (e.g. on Anyscale): not a file
                    spec.compute_config.startswith(r.prefix) for r in registered_compute_configs())
                if spec.compute_config and not registered:
                    load_compute_config(spec.compute_config, project_of(ref), f"{shown}: ")  # the job's project's
                # The requirements file exists, and every line can install on a cluster.
                lines = requirement_lines(spec.requirements, source.path, declared_at(shown, source.lines))
                warnings += cluster_problems(lines or [])
                warnings += _notify_unset(spec, shown, job_ref)
                if spec.image_uri is None and spec.requirements is None:
                    warnings.append(f"{shown}: declares neither image_uri nor requirements: on a stock cluster "
                                    "(Anyscale's default image, a plain Ray cluster) its entrypoint may miss packages "
                                    "(`requirements: []` if it needs none)")
            shown = pipeline.shown if pipeline is not None else shown
            checked.append({"kind": "pipeline" if pipeline else "job", "ref": ref, "file": shown, "ok": True,
                            "error": None, "warning": "; ".join(warnings) or None})
        except RtjobError as exc:
            checked.append({"kind": "job", "ref": ref, "file": None, "ok": False, "error": exc.message})
    if not refs:
        for name in compute_config_names(root):
            try:
                _, shown = load_compute_config(name, root)
                checked.append({"kind": "compute_config", "ref": name, "file": shown, "ok": True, "error": None})
            except RtjobError as exc:
                checked.append({"kind": "compute_config", "ref": name, "file": None, "ok": False,
                                "error": exc.message})
    if not targets and not refs:
        raise BadInput(f"no jobs found in {root / 'jobs'}")
    if output != "text":
        print_data(checked, output)
    else:
        for item in checked:
            if item["ok"]:
                echo(f"ok      {item['file']}")
            else:
                echo(f"error   {item['error']}", err=True)
            if item.get("warning"):
                echo(f"warning {item['warning']}", err=True)
    return EXIT_SUCCEEDED if all(item["ok"] for item in checked) else EXIT_BAD_INPUT


def _notify_unset(spec: Any, shown: str, ref: str) -> list[str]:
    """A warning when the job's notifications (its `notify:`, else the project's or a context's) name a variable this
    machine does not set: validate checks the files, the variable is a fact of where render and submit run (they
    refuse it)."""
    from ..jobspec.resolve import resolve_notify
    from .settings import settings_from

    try:
        resolve_notify(spec, shown, settings_from(None, None, (), False, job=ref), spec.env_vars)
    except RtjobError as exc:
        return [f"{exc.message}: render and submit refuse it here"]
    return []


@click.command()
@click.option("--compute-config", "which", flag_value="compute", help="The compute-config schema instead.")
@click.option("--job", "which", flag_value="job", default=True, help="The job schema (default).")
def schema(which: str) -> int:
    """Print the JSON Schema of job (or compute-config) YAML files, for editor completion.

    \b
    Examples:
      rtjob schema > job.schema.json
      rtjob schema --compute-config
    """
    from ..jobspec.schema import compute_config_json_schema, job_json_schema

    print_json(compute_config_json_schema() if which == "compute" else job_json_schema())
    return EXIT_SUCCEEDED


@click.command()
@click.argument("folder", default=".", type=click.Path(file_okay=False), metavar="[DIR]")
@click.option("--entrypoint", default="python train.py", show_default=True,
              help="The command that runs your script, from the project folder.")
@click.option("--name", help="The starter job's name (default: the script's name).")
@click.option("--github", is_flag=True, help="Also a scheduled GitHub Actions workflow that runs the job.")
@click.option("--cron", default="0 3 * * *", show_default=True, help="With --github: when (UTC).")
def init(folder: str, entrypoint: str, name: str | None, github: bool, cron: str) -> int:
    """Make DIR (default: here) an rtjob project: a starter job for your script, a compute config to edit,
    the project config, .gitignore entries, JSON schemas for editors. Existing files are never overwritten.

    \b
    Examples:
      rtjob init --entrypoint "python train.py --epochs 2"
      rtjob init my-project --github
    """
    from pathlib import Path

    from ..scaffold.init_files import init_project

    target = Path(folder)
    for step in init_project(target, entrypoint=entrypoint, name=name, github=github, cron=cron):
        echo(f"{step.action:<9} {target / step.path}")
    return EXIT_SUCCEEDED


@compute_config_group.command("list")
@output_option
def compute_config_list(output: str) -> int:
    """List the compute configs a job can name: the project's own (compute_configs/*.yaml) and the ones built
    into rtjob (one per catalog instance type); a project's own file overrides a built-in of the same name.

    \b
    Examples:
      rtjob compute-config list
      rtjob compute-config list -o yaml
    """
    from ..jobspec.project import builtin_compute_config_names, compute_config_names, find_root
    from ..jobspec.resolve import load_compute_config, pick_group

    root = find_root()
    own, builtin = set(compute_config_names(root)), set(builtin_compute_config_names())
    rows: list[dict[str, Any]] = []
    for name in sorted(own | builtin):
        origin = "built-in" if name not in own else ("project, overrides built-in" if name in builtin else "project")
        row: dict[str, Any] = {"name": name, "origin": origin, "worker_group": None, "max_nodes": None,
                               "file": None, "error": None}
        try:
            cc, row["file"] = load_compute_config(name, root)
            group = pick_group(cc, None, row["file"])
            if group is not None:
                row["worker_group"], row["max_nodes"] = group.instance_type, group.max_nodes
        except RtjobError as exc:
            row["error"] = exc.message
        rows.append(row)
    print_rows(rows, [("name", "NAME"), ("origin", "ORIGIN"), (_invalid_or("worker_group"), "WORKERS"),
                      ("max_nodes", "MAX NODES"), ("file", "FILE")], output)
    return EXIT_SUCCEEDED


COMMANDS = [jobs, validate, schema, init]
