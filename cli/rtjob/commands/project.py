"""The project's own files: `rtjob jobs`, `validate`, `schema`."""

from __future__ import annotations

from typing import Any

import click

from ..core.errors import EXIT_BAD_INPUT, EXIT_SUCCEEDED, BadInput, RtjobError
from .options import complete_job, output_option
from .printing import echo, print_data, print_json, print_rich


@click.command()
@output_option
def jobs(output: str) -> int:
    """List the named jobs of this project (jobs/*.yaml).

    \b
    Examples:
      rtjob jobs
      rtjob jobs -o yaml
    """
    from ..spec.project import find_root, job_file_of, job_names
    from ..spec.resolve import load_job_file

    root = find_root()
    rows: list[dict[str, Any]] = []
    for name in job_names(root):
        try:  # by its file: a `name:` elsewhere that equals this file name must not make it ambiguous here
            spec, shown = load_job_file(str(job_file_of(name, root)), root)
            rows.append({"name": name, "description": spec.description, "strategy": spec.strategy,
                         "nodes": spec.nodes, "compute_config": spec.compute_config, "file": shown, "error": None})
        except RtjobError as exc:
            rows.append({"name": name, "description": "", "strategy": "-", "nodes": None, "compute_config": None,
                         "file": _job_file_shown(name, root), "error": exc.message})
    if output != "text":
        print_data(rows, output)
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
    from ..spec.project import find_job_file, job_file_of

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
    from ..spec.project import compute_config_names, find_root, job_names, project_of
    from ..spec.resolve import REGISTERED_PREFIX, Overrides, load_compute_config, load_job

    root = find_root()
    checked: list[dict[str, Any]] = []  # {kind, ref, file, ok, error}, in the order checked
    targets = list(refs) or job_names(root)
    for ref in targets:
        try:
            spec, shown = load_job(ref, root, Overrides(), local_profile=True)
            if spec.compute_config and not spec.compute_config.startswith(REGISTERED_PREFIX):  # on Anyscale
                load_compute_config(spec.compute_config, project_of(ref), f"{shown}: ")  # the job's project's
            checked.append({"kind": "job", "ref": ref, "file": shown, "ok": True, "error": None})
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
    return EXIT_SUCCEEDED if all(item["ok"] for item in checked) else EXIT_BAD_INPUT


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
    from ..spec.schema import compute_config_json_schema, job_json_schema

    print_json(compute_config_json_schema() if which == "compute" else job_json_schema())
    return EXIT_SUCCEEDED


COMMANDS = [jobs, validate, schema]
