"""rtjob's command line: parse flags, call one function, print text or JSON.

Heavy modules (ray, pydantic specs, rich, requests) are imported inside the commands so that
`rtjob --help` stays instant.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SUCCEEDED,
    BadInput,
    RtjobError,
)

if TYPE_CHECKING:
    from .backends.base import Backend, RunInfo
    from .project import Settings

EXIT_CODES_HELP = """\b
Exit codes:
  0  the run succeeded (or the command did what it was asked)
  1  the run failed or was stopped
  2  bad input: usage, validation, unknown job or run, a job that can never fit
  3  cluster unreachable or authentication failed
  4  wait timed out (--timeout); the job is left running
  130  interrupted while following (Ctrl-C); the job is left running
"""

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _backend_options(func: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--backend", type=click.Choice(["local", "ray", "anyscale"]), help="Where to run (default: local unless an address is set)."),
        click.option("--address", help="Ray dashboard / Jobs API address, e.g. http://head:8265 (env RAY_ADDRESS)."),
        click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="Extra HTTP header for the Jobs API (repeatable; env RAY_JOB_HEADERS as JSON)."),
        click.option("--no-verify-tls", is_flag=True, help="Do not verify the cluster's TLS certificate."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.argument("job"),
        click.option("--nodes", type=click.IntRange(1, 1000), help="Nodes of the job's worker group (workers = nodes × GPUs per node)."),
        click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help="Override a job field, typed by the schema, e.g. --set args.epochs=5."),
        click.option("--env", "envs", multiple=True, metavar="NAME=VALUE", help="Add or override an environment variable of the job."),
        click.option("--name", help="Override the job's name."),
        click.option("--storage", help="Where the run writes checkpoints: s3://bucket/prefix or a path."),
        click.option("--compute-config", help="Compute config name (compute_configs/NAME.yaml) or path."),
        click.option("--submission-id", help="Run id; if a run with this id exists, attach to it instead of submitting again."),
        click.option("--forward-aws-credentials", is_flag=True, help="Copy this client's AWS credentials (standard chain) into the job's environment, masked everywhere; off by default."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _output_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)(func)


def _settings(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, **extra: Any) -> Settings:
    from .overrides import parse_headers
    from .project import load_settings

    flags: dict[str, Any] = {"backend": backend, "address": address, **extra}
    if headers:
        flags["headers"] = parse_headers(headers)
    if no_verify_tls:
        flags["verify_tls"] = False
    return load_settings(flags)


def _outcome(info: RunInfo) -> int:
    from .backends.base import RunStatus

    return EXIT_SUCCEEDED if info.status == RunStatus.SUCCEEDED else EXIT_FAILED


def _parse_timeout(timeout: str | None) -> float | None:
    from .overrides import parse_duration

    return parse_duration(timeout) if timeout is not None else None


@click.group(context_settings=CONTEXT, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="rtjob", prog_name="rtjob")
def cli() -> None:
    """Submit PyTorch training jobs to Ray clusters and Anyscale from one job spec.

    \b
    rtjob submit ddp-resnet --nodes 2          run a job (embedded local cluster by default)
    rtjob render ddp-resnet --output json      show the exact request, send nothing
    rtjob wait RUN_ID --timeout 2h             wait with an exit code CI can trust
    """


# ---------------------------------------------------------------------------------------------
# submit / render


def _resolve(job: str, settings: Settings, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...],
             name: str | None, storage: str | None, submission_id: str | None, forward_aws_credentials: bool = False) -> Any:
    from .resolve import Overrides, resolve

    overrides = Overrides(nodes=nodes, sets=sets, env=envs, name=name, submission_id=submission_id,
                          forward_aws_credentials=forward_aws_credentials)
    return resolve(job, settings, overrides, storage_flag=storage)


def _shown_setting(key: str, value: Any) -> Any:
    from .masking import mask_url

    if key == "headers":
        return "(masked)"
    return mask_url(value) if isinstance(value, str) else value


def _print_render(backend: Backend, request: Any, job: Any, settings: Settings, output: str, explain: bool,
                  warnings: list[str]) -> None:
    from .cost import job_cost
    from .output import print_json

    if output == "yaml":  # a file for the backend's own CLI (anyscale job submit -f)
        to_yaml = getattr(backend, "render_yaml", None)
        if to_yaml is None:
            raise BadInput(f"--output yaml writes an Anyscale job file; backend {backend.name!r} has none (use json)")
        click.echo(to_yaml(request), nl=False)
        return
    rendered = backend.render(request)
    cost = job_cost(job) if backend.name != "local" else None  # the embedded cluster is this machine
    if output == "json":
        data = dict(rendered)
        data["cost"] = cost.to_json() if cost else None
        data["run"] = {
            "id": job.run_id, "job": job.spec.name, "job_file": job.job_file, "nodes": job.nodes,
            "workers": job.num_workers, "resources_per_worker": job.worker_resources(),
            "compute_config": job.compute_config_name, "storage_uri": job.storage_uri,
        }
        if explain:
            data["explain"] = {k: {"value": _shown_setting(k, s.value), "source": s.source}
                               for k, s in settings.values.items()}
        data["notes"] = job.notes + warnings
        print_json(data)
        return
    res = ", ".join(f"{k}={v:g}" for k, v in job.worker_resources().items())
    lines = [
        f"job:       {job.spec.name}  ({job.job_file})",
        f"backend:   {backend.name}  {getattr(backend, 'display_address', backend.address)}",
        f"shape:     {job.nodes} node(s) × {job.workers_per_node} worker(s) = {job.num_workers} worker(s), each {{{res}}}",
        f"compute:   {job.compute_config_name or '-'}",
        *([f"cost:      {cost.text()}"] if cost else []),
        f"run id:    {job.run_id}",
        f"storage:   {job.storage_uri or '-'}",
    ]
    for note in job.notes + warnings:
        lines.append(f"note:      {note}")
    if explain:
        lines.append("settings:")
        for key, setting in settings.values.items():
            value = _shown_setting(key, setting.value)
            lines.append(f"  {key:<15} {value!s:<40} from {setting.source}")
    import json

    lines.append("request:")
    lines.append(json.dumps(rendered, indent=2))
    lines.append("equivalent:")
    lines.append("  " + backend.equivalent_command(request))
    click.echo("\n".join(lines))


@cli.command(epilog=EXIT_CODES_HELP)
@_job_options
@_backend_options
@click.option("--output", "-o", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True,
              help="yaml (--backend anyscale): a job file `anyscale job submit -f` accepts.")
@click.option("--explain", is_flag=True, help="Show where each effective setting came from.")
def render(job: str, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...], name: str | None,
           storage: str | None, compute_config: str | None, submission_id: str | None, forward_aws_credentials: bool,
           backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str,
           explain: bool) -> int:
    """Print the exact request a submit would send (same as submit --dry-run). Sends nothing."""
    from .backends import get_backend

    settings = _settings(backend, address, headers, no_verify_tls, storage=storage, compute_config=compute_config)
    resolved = _resolve(job, settings, nodes, sets, envs, name, storage, submission_id, forward_aws_credentials)
    be = get_backend(settings, offline=True)
    _print_render(be, be.plan(resolved), resolved, settings, output, explain, [])
    return EXIT_SUCCEEDED


@cli.command(epilog=EXIT_CODES_HELP)
@_job_options
@_backend_options
@_output_option
@click.option("--dry-run", is_flag=True, help="Print the exact request and send nothing (= rtjob render).")
@click.option("--no-wait", is_flag=True, help="Return as soon as the job is submitted.")
@click.option("--timeout", metavar="DURATION", help="Stop following after this long (90s, 15m, 2h); exit 4, job left running.")
@click.option("--stop-on-interrupt", is_flag=True, help="Ctrl-C stops the job instead of detaching from it.")
@click.option("--explain", is_flag=True, help="With --dry-run: show where each setting came from.")
def submit(job: str, nodes: int | None, sets: tuple[str, ...], envs: tuple[str, ...], name: str | None,
           storage: str | None, compute_config: str | None, submission_id: str | None, forward_aws_credentials: bool,
           backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str, dry_run: bool,
           no_wait: bool, timeout: str | None, stop_on_interrupt: bool, explain: bool) -> int:
    """Submit JOB (a name in jobs/ or a YAML path), follow its logs, exit with its outcome."""
    from .backends import get_backend
    from .output import print_json, say

    timeout_s = _parse_timeout(timeout)
    settings = _settings(backend, address, headers, no_verify_tls, storage=storage, compute_config=compute_config)
    resolved = _resolve(job, settings, nodes, sets, envs, name, storage, submission_id, forward_aws_credentials)
    offline = get_backend(settings, offline=True)
    planned = offline.plan(resolved)  # every check that needs no cluster, before one is started
    if dry_run:
        _print_render(offline, planned, resolved, settings, output, explain, [])
        return EXIT_SUCCEEDED
    be = get_backend(settings, start_local=True, nodes=resolved.nodes, cpus_per_node=resolved.spec.local.cpus_per_node)
    request = be.plan(resolved)
    existing = be.find(resolved.run_id) if submission_id else None
    if existing is None:
        for warning in be.precheck(resolved):
            say(f"warning: {warning}")
        result = be.submit(request)
        info, created = result.run, result.created
    else:
        info, created = existing, False
    for note in resolved.notes:
        say(f"note: {note}")
    if created:
        say(f"submitted {resolved.spec.name} as {info.id} ({be.name}, {resolved.nodes} node(s), "
            f"{resolved.num_workers} worker(s); storage {info.storage_uri or '-'})")
        from .cost import job_cost

        hourly = job_cost(resolved) if be.name != "local" else None
        if hourly is not None:
            say(f"cost: {hourly.text()}")
    else:
        say(f"run {info.id} already exists ({info.status.value}); attaching instead of submitting again")
    if no_wait:
        if output == "json":
            print_json(_json(info))
        else:
            click.echo(info.id)
        return EXIT_SUCCEEDED
    return _follow_and_report(be, info.id, output, timeout_s, stop_on_interrupt, logs=True, request=request)


def _json(info: RunInfo) -> dict[str, Any]:
    from .output import run_json

    return run_json(info)


def _follow_and_report(be: Backend, run_id: str, output: str, timeout_s: float | None, stop_on_interrupt: bool,
                       logs: bool, request: Any = None) -> int:
    from .follow import follow
    from .output import duration, print_json, say
    from .retries import follow_with_retries

    log_out = (sys.stdout if output == "text" else sys.stderr) if logs else None
    try:
        # Ray: a run whose driver was lost is resubmitted while the job's max_retries allows (retries.py).
        info = follow_with_retries(
            be, run_id, follow=follow, out=log_out, timeout_s=timeout_s, say=say, local=request,
            on_status=lambda i: say(f"{i.id}: {i.status.value}") if not i.status.terminal else None)
    except KeyboardInterrupt:
        if stop_on_interrupt:
            say(f"interrupted: stopping {run_id} ...")
            info = be.stop(run_id)
            say(f"{run_id}: {info.status.value}")
            if output == "json":
                print_json(_json(info))
            return EXIT_FAILED
        say(f"detached; {run_id} keeps running. Re-attach: rtjob logs {run_id} --follow  (or rtjob wait {run_id})")
        return EXIT_INTERRUPTED
    # The first line only: Ray appends the log's tail to a failure message, and it was just printed.
    first = (info.message or "").strip().splitlines()[0] if info.message else ""
    message = f": {first}" if first and info.status.value != "SUCCEEDED" else ""
    from .masking import redact

    say(f"{info.id} {info.status.value} after {duration(info)}{redact(message, info.secrets)}")
    if output == "json":
        print_json(_json(info))
    return _outcome(info)


# ---------------------------------------------------------------------------------------------
# run control


def _run_backend(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool) -> Backend:
    from .backends import get_backend

    return get_backend(_settings(backend, address, headers, no_verify_tls))


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("run_id")
@_backend_options
@_output_option
def status(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
           output: str) -> int:
    """Show one run's status (exit 0 when it could be read)."""
    from .cost import finished_run_cost
    from .output import print_json, run_text

    be = _run_backend(backend, address, headers, no_verify_tls)
    info = be.status(run_id)
    cost = finished_run_cost(be, info)  # duration × the rate of its cluster, once it has ended
    attempts, attempts_text = _attempts(be, run_id)
    if output == "json":
        print_json({**_json(info), "cost": cost, **attempts})
    else:
        line = f"\nattempts:    {attempts_text}" if attempts_text else ""
        click.echo(run_text(info) + (f"\ncost:        {cost['text']}" if cost else "") + line)
    return EXIT_SUCCEEDED


def _attempts(be: Backend, run_id: str) -> tuple[dict[str, Any], str | None]:
    """Ray: the run's attempts (rtjob's job-level retries) as JSON fields and a text line; none elsewhere."""
    from . import retries

    if not retries.supports_retries(be):
        return {}, None
    chain = retries.attempts(be, run_id)  # type: ignore[arg-type]
    data = be.api.job(run_id) or {}  # type: ignore[attr-defined]
    allowed = retries.max_retries_of(data)
    meta = data.get("metadata") or {}
    fields = {
        "attempt": int(meta.get(retries.META_ATTEMPT, 1)),
        "parent": meta.get(retries.META_PARENT),
        "attempts": [a.to_json() for a in chain],
    }
    return fields, retries.describe(chain, allowed) if len(chain) > 1 or allowed else None


@cli.command(name="list", epilog=EXIT_CODES_HELP)
@_backend_options
@_output_option
@click.option("--job", "job_filter", help="Only runs of this job.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
def list_runs(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str,
              job_filter: str | None, limit: int) -> int:
    """List runs on the cluster, newest first."""
    from .output import print_json, runs_table

    runs = _run_backend(backend, address, headers, no_verify_tls).list()
    if job_filter:
        runs = [r for r in runs if r.job == job_filter]
    runs = runs[:limit]
    if output == "json":
        print_json([_json(r) for r in runs])
    else:
        runs_table(runs)
    return EXIT_SUCCEEDED


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("run_id")
@_backend_options
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the run ends; exit with its outcome.")
@click.option("--timeout", metavar="DURATION", help="With --follow: give up after this long (exit 4).")
def logs(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         follow: bool, timeout: str | None) -> int:
    """Print a run's log (all of it; --follow keeps streaming)."""
    from .masking import redact

    timeout_s = _parse_timeout(timeout)
    be = _run_backend(backend, address, headers, no_verify_tls)
    if follow:
        return _follow_and_report(be, run_id, "text", timeout_s, False, logs=True)
    info = be.status(run_id)
    text = be.logs(run_id)
    sys.stdout.write(redact(text, info.secrets))
    return EXIT_SUCCEEDED


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("run_id")
@_backend_options
@_output_option
@click.option("--timeout", metavar="DURATION", help="Give up after this long (90s, 15m, 2h): exit 4, job left running.")
def wait(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str, timeout: str | None) -> int:
    """Wait for a run to end; exit 0 succeeded, 1 failed/stopped, 4 timed out."""
    timeout_s = _parse_timeout(timeout)
    be = _run_backend(backend, address, headers, no_verify_tls)
    return _follow_and_report(be, run_id, output, timeout_s, False, logs=False)


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("run_id")
@_backend_options
@_output_option
def stop(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str) -> int:
    """Stop a run and wait (up to 30 s) until it has stopped."""
    from .output import print_json, say

    info = _run_backend(backend, address, headers, no_verify_tls).stop(run_id)
    if output == "json":
        print_json(_json(info))
    else:
        say(f"{info.id}: {info.status.value}")
    return EXIT_SUCCEEDED


# ---------------------------------------------------------------------------------------------
# jobs, validation, schema


@cli.command()
@_output_option
def jobs(output: str) -> int:
    """List the named jobs of this project (jobs/*.yaml)."""
    from .output import print_json
    from .project import find_job_file, find_root, job_names
    from .spec import validate_job
    from .yamlsrc import load_yaml

    root = find_root()
    rows: list[dict[str, Any]] = []
    for name in job_names(root):
        path, shown = find_job_file(name, root)
        try:
            spec = validate_job(load_yaml(path, shown))
            rows.append({"name": name, "description": spec.description, "strategy": spec.strategy,
                         "nodes": spec.nodes, "compute_config": spec.compute_config, "file": shown, "error": None})
        except RtjobError as exc:
            rows.append({"name": name, "description": "", "strategy": "-", "nodes": None, "compute_config": None,
                         "file": shown, "error": exc.message})
    if output == "json":
        print_json(rows)
        return EXIT_SUCCEEDED
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("JOB", "STRATEGY", "NODES", "COMPUTE", "DESCRIPTION"):
        table.add_column(column, overflow="fold")
    for row in rows:
        desc = f"INVALID: {row['error']}" if row["error"] else row["description"]
        table.add_row(row["name"], row["strategy"], str(row["nodes"] or "-"), row["compute_config"] or "-", desc)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    return EXIT_SUCCEEDED


@cli.command()
@click.argument("refs", nargs=-1, metavar="[JOB...]")
def validate(refs: tuple[str, ...]) -> int:
    """Validate the given jobs, or every shipped job and compute config (exit 2 on any error)."""
    from .project import compute_config_names, find_root, job_names, load_settings
    from .resolve import REGISTERED_PREFIX, Overrides, load_compute_config, load_job

    root = find_root()
    settings = load_settings({}, root)
    errors = 0
    targets = list(refs) or job_names(root)
    for ref in targets:
        try:
            spec, shown = load_job(ref, root, "local", Overrides())
            if spec.compute_config and not spec.compute_config.startswith(REGISTERED_PREFIX):  # on Anyscale
                load_compute_config(spec.compute_config, root, f"{shown}: ")
            click.echo(f"ok      {shown}")
        except RtjobError as exc:
            errors += 1
            click.echo(f"error   {exc.message}", err=True)
    if not refs:
        for name in compute_config_names(root):
            try:
                _, shown = load_compute_config(name, root)
                click.echo(f"ok      {shown}")
            except RtjobError as exc:
                errors += 1
                click.echo(f"error   {exc.message}", err=True)
    del settings
    if not targets and not refs:
        raise BadInput(f"no jobs found in {root / 'jobs'}")
    return EXIT_BAD_INPUT if errors else EXIT_SUCCEEDED


@cli.command()
@click.option("--compute-config", "which", flag_value="compute", help="The compute-config schema instead.")
@click.option("--job", "which", flag_value="job", default=True, help="The job schema (default).")
def schema(which: str) -> int:
    """Print the JSON Schema of job (or compute-config) YAML files, for editor completion."""
    from .output import print_json
    from .spec import compute_config_json_schema, job_json_schema

    print_json(compute_config_json_schema() if which == "compute" else job_json_schema())
    return EXIT_SUCCEEDED


# ---------------------------------------------------------------------------------------------
# the embedded local cluster


@cli.group()
def local() -> None:
    """The embedded local Ray cluster (started on demand by submit)."""


@local.command("up")
@click.option("--nodes", type=click.IntRange(1, 16), default=1, show_default=True, help="Ray nodes (raylets) to run.")
@click.option("--cpus-per-node", type=click.IntRange(1, 64), default=1, show_default=True)
def local_up(nodes: int, cpus_per_node: int) -> int:
    """Start the embedded cluster (or grow it to NODES nodes)."""
    from . import local_cluster
    from .output import say

    cluster = local_cluster.up(nodes, cpus_per_node, log=say)
    count = len(local_cluster.alive_nodes(cluster) or [])
    say(f"embedded cluster up: {count} node(s), dashboard {cluster.address}")
    return EXIT_SUCCEEDED


@local.command("down")
def local_down() -> int:
    """Stop the embedded cluster (only the processes rtjob started)."""
    from . import local_cluster
    from .output import say

    count = local_cluster.down()
    say(f"embedded cluster stopped ({count} processes ended)" if count else "no embedded cluster was running")
    return EXIT_SUCCEEDED


@local.command("status")
@_output_option
def local_status(output: str) -> int:
    """Show the embedded cluster's nodes and resources (exit 3 if it is not running)."""
    from . import local_cluster
    from .output import print_json

    cluster = local_cluster.require()
    nodes = local_cluster.alive_nodes(cluster) or []
    cpus = sum(float((n.get("resources_total") or {}).get("CPU", 0)) for n in nodes)
    if output == "json":
        print_json({"address": cluster.address, "nodes": len(nodes), "cpus": cpus, "temp_dir": cluster.temp_dir})
    else:
        click.echo(f"address: {cluster.address}\nnodes:   {len(nodes)}\nCPUs:    {cpus:g}\nlogs:    {cluster.temp_dir}")
    return EXIT_SUCCEEDED


# ---------------------------------------------------------------------------------------------
# Anyscale compute configs and schedules (their module imports only click until a command runs)

from .anyscale_commands import compute_config_group, schedule_group  # noqa: E402

cli.add_command(compute_config_group)
cli.add_command(schedule_group)

# `rtjob pull` and `rtjob results`: a run's storage (s3:// or a folder), independent of the backend
from .storage_commands import storage_commands  # noqa: E402

for _command in storage_commands(_backend_options, _run_backend):
    cli.add_command(_command)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Entry point: one line per error, the documented exit codes, never a traceback for bad input."""
    try:
        code = cli.main(args=argv, prog_name="rtjob", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "rtjob"
        click.echo(f"rtjob: error: {exc.format_message()} (see {cmd} --help)", err=True)
        code = EXIT_BAD_INPUT
    except click.Abort:
        code = EXIT_INTERRUPTED
    except RtjobError as exc:
        click.echo(f"rtjob: error: {exc.message}", err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
