"""The project's own files: `rtjob jobs`, `validate`, `schema`, `compute-config list`, `init`."""

from __future__ import annotations

from typing import Any

import click

from ..core.errors import EXIT_BAD_INPUT, EXIT_SUCCEEDED, BadInput, RtjobError
from .anyscale import compute_config_group
from .options import output_option
from .printing import echo, print_json, print_rich


@click.command()
@output_option
def jobs(output: str) -> int:
    """List the named jobs of this project (jobs/*.yaml)."""
    from ..spec.project import find_root, job_names
    from ..spec.resolve import load_job_file

    root = find_root()
    rows: list[dict[str, Any]] = []
    for name in job_names(root):
        try:
            spec, shown = load_job_file(name, root)
            rows.append({"name": name, "description": spec.description, "strategy": spec.strategy,
                         "nodes": spec.nodes, "compute_config": spec.compute_config, "file": shown, "error": None})
        except RtjobError as exc:
            rows.append({"name": name, "description": "", "strategy": "-", "nodes": None, "compute_config": None,
                         "file": _job_file_shown(name, root), "error": exc.message})
    if output == "json":
        print_json(rows)
        return EXIT_SUCCEEDED
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("JOB", "STRATEGY", "NODES", "COMPUTE", "DESCRIPTION"):
        table.add_column(column, overflow="fold")
    for row in rows:
        desc = f"INVALID: {row['error']}" if row["error"] else row["description"]
        table.add_row(row["name"], row["strategy"], str(row["nodes"] or "-"), row["compute_config"] or "-", desc)
    print_rich(table)
    return EXIT_SUCCEEDED


def _job_file_shown(name: str, root: Any) -> str:
    from ..spec.project import find_job_file

    return find_job_file(name, root)[1]


@click.command()
@click.argument("refs", nargs=-1, metavar="[JOB...]")
def validate(refs: tuple[str, ...]) -> int:
    """Validate the given jobs, or every shipped job and compute config (exit 2 on any error)."""
    from ..spec.project import compute_config_names, find_job_file, find_root, job_names
    from ..spec.requirements import read_requirements
    from ..spec.resolve import REGISTERED_PREFIX, Overrides, load_compute_config, load_job

    root = find_root()
    errors = 0
    targets = list(refs) or job_names(root)
    for ref in targets:
        try:
            spec, shown = load_job(ref, root, Overrides(), local_profile=True)
            if spec.compute_config and not spec.compute_config.startswith(REGISTERED_PREFIX):  # on Anyscale
                load_compute_config(spec.compute_config, root, f"{shown}: ")
            read_requirements(spec.requirements, find_job_file(ref, root)[0], shown)  # a requirements file exists
            echo(f"ok      {shown}")
            if spec.image_uri is None and spec.requirements is None:
                echo(f"warning {shown}: declares neither image_uri nor requirements: on a stock cluster (Anyscale's "
                     "default image, a plain Ray cluster) its entrypoint may miss packages (`requirements: []` "
                     "if it needs none)", err=True)
        except RtjobError as exc:
            errors += 1
            echo(f"error   {exc.message}", err=True)
    if not refs:
        for name in compute_config_names(root):
            try:
                _, shown = load_compute_config(name, root)
                echo(f"ok      {shown}")
            except RtjobError as exc:
                errors += 1
                echo(f"error   {exc.message}", err=True)
    if not targets and not refs:
        raise BadInput(f"no jobs found in {root / 'jobs'}")
    return EXIT_BAD_INPUT if errors else EXIT_SUCCEEDED


@click.command()
@click.option("--compute-config", "which", flag_value="compute", help="The compute-config schema instead.")
@click.option("--job", "which", flag_value="job", default=True, help="The job schema (default).")
def schema(which: str) -> int:
    """Print the JSON Schema of job (or compute-config) YAML files, for editor completion."""
    from ..spec.schema import compute_config_json_schema, job_json_schema

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
    rtjob init --entrypoint "python train.py --epochs 2"
    rtjob init my-project --github
    """
    from pathlib import Path

    from ..runs.scaffold import init_project

    target = Path(folder)
    for step in init_project(target, entrypoint=entrypoint, name=name, github=github, cron=cron):
        echo(f"{step.action:<9} {target / step.path}")
    return EXIT_SUCCEEDED


@compute_config_group.command("list")
@output_option
def compute_config_list(output: str) -> int:
    """List the compute configs a job can name: the project's own (compute_configs/*.yaml) and the ones built
    into rtjob (one per catalog instance type); a project's own file overrides a built-in of the same name."""
    from ..spec.project import builtin_compute_config_names, compute_config_names, find_root
    from ..spec.resolve import load_compute_config, pick_group

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
    if output == "json":
        print_json(rows)
        return EXIT_SUCCEEDED
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("NAME", "ORIGIN", "WORKERS", "MAX NODES", "FILE"):
        table.add_column(column, overflow="fold")
    for row in rows:
        workers = f"INVALID: {row['error']}" if row["error"] else (row["worker_group"] or "-")
        table.add_row(row["name"], row["origin"], workers, str(row["max_nodes"] or "-"), row["file"] or "-")
    print_rich(table)
    return EXIT_SUCCEEDED


COMMANDS = [jobs, validate, schema, init]
