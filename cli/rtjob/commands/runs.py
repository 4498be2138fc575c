"""Run control: `rtjob status`, `list`, `logs`, `wait`, `stop` (any backend, through its contract)."""

from __future__ import annotations

import click

from ..core.errors import EXIT_SUCCEEDED
from .options import (
    EXIT_CODES_HELP,
    backend_from,
    backend_options,
    output_option,
    parse_timeout,
    run_id_argument,
)
from .printing import echo, follow_and_report, print_json, run_json, run_text, runs_table, say


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
def status(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
           output: str) -> int:
    """Show one run's status (exit 0 when it could be read)."""
    from ..runs.cost import finished_run_cost

    be = backend_from(backend, address, headers, no_verify_tls)
    info = be.status(run_id)
    cost = finished_run_cost(be, info)  # duration × the rate recorded with the run, once it has ended
    attempts = be.attempts(run_id)  # rtjob's own retries (Ray); None where the platform retries
    if output == "json":
        print_json({**run_json(info), "cost": cost, **(attempts.to_json() if attempts else {})})
    else:
        line = f"\nattempts:    {attempts.describe()}" if attempts and attempts.worth_showing else ""
        echo(run_text(info) + (f"\ncost:        {cost['text']}" if cost else "") + line)
    return EXIT_SUCCEEDED


@click.command(name="list", epilog=EXIT_CODES_HELP)
@backend_options
@output_option
@click.option("--job", "job_filter", help="Only runs of this job.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
def list_runs(backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool, output: str,
              job_filter: str | None, limit: int) -> int:
    """List runs on the cluster, newest first."""
    runs = backend_from(backend, address, headers, no_verify_tls).list()
    if job_filter:
        runs = [r for r in runs if r.job == job_filter]
    runs = runs[:limit]
    if output == "json":
        print_json([run_json(r) for r in runs])
    else:
        runs_table(runs)
    return EXIT_SUCCEEDED


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the run ends; exit with its outcome.")
@click.option("--timeout", metavar="DURATION", help="With --follow: give up after this long (exit 4).")
def logs(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         follow: bool, timeout: str | None) -> int:
    """Print a run's log (all of it; --follow keeps streaming)."""
    from ..core.redact import redact

    timeout_s = parse_timeout(timeout)
    be = backend_from(backend, address, headers, no_verify_tls)
    if follow:
        return follow_and_report(be, run_id, "text", timeout_s, False, logs=True)
    info = be.status(run_id)
    echo(redact(be.logs(run_id), info.secrets), nl=False)
    return EXIT_SUCCEEDED


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
@click.option("--timeout", metavar="DURATION", help="Give up after this long (90s, 15m, 2h): exit 4, job left running.")
def wait(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str, timeout: str | None) -> int:
    """Wait for a run to end; exit 0 succeeded, 1 failed/stopped, 4 timed out."""
    timeout_s = parse_timeout(timeout)
    be = backend_from(backend, address, headers, no_verify_tls)
    return follow_and_report(be, run_id, output, timeout_s, False, logs=False)


@click.command(epilog=EXIT_CODES_HELP)
@run_id_argument
@backend_options
@output_option
def stop(run_id: str, backend: str | None, address: str | None, headers: tuple[str, ...], no_verify_tls: bool,
         output: str) -> int:
    """Stop a run and wait (up to 30 s) until it has stopped."""
    info = backend_from(backend, address, headers, no_verify_tls).stop(run_id)
    if output == "json":
        print_json(run_json(info))
    else:
        say(f"{info.id}: {info.status.value}")
    return EXIT_SUCCEEDED


COMMANDS = [status, list_runs, logs, wait, stop]
