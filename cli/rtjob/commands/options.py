"""Options declared once, shared by every command: where to run, which job, how to print."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..backends import DEFAULT
from .completion import compute_config_names_starting, job_names_starting, run_ids_starting
from .settings import CONTEXT_KEY, QUEUE_KEY

EXIT_CODES_HELP = """\b
Exit codes:
  0  the run succeeded (or the command did what it was asked)
  1  the run failed or was stopped
  2  bad input: usage, validation, unknown job or run, a job that can never fit (also a
     run stopped while following because it waited for resources the cluster does not have)
  3  cluster or storage unreachable, not a Ray dashboard, or authentication failed; storage refused
     (a submit's storage check: nothing was submitted); a run whose outputs were not stored (its
     node keeps them: rtjob sync RUN_ID)
  4  wait timed out (--timeout); the job is left running
  70  internal error in rtjob itself (not the run's outcome); traceback saved, RTJOB_DEBUG=1 prints it
  130  interrupted while following (Ctrl-C); the job is left running
"""

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

F = Callable[..., Any]


class BackendChoice(click.Choice[str]):
    """--backend's choices: the registry's names, read when first needed (a plug-in backend's entry point is read
    then, not each time rtjob starts)."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        from ..backends import backend_names

        return backend_names()

    @choices.setter
    def choices(self, value: tuple[str, ...]) -> None:
        pass  # the registry is the only source


class BackendNamesHelp(click.Option):
    """An option whose help names the registered backends (``{backends}``), filled in when help is shown."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ..backends import backend_names

        if self.help:
            self.help = self.help.replace("{backends}", ", ".join(backend_names()))
        return super().get_help_record(ctx)


def _apply(func: F, opts: list[Callable[[F], F]]) -> F:
    for opt in reversed(opts):
        func = opt(func)
    return func


def backend_options(func: F) -> F:
    return _apply(func, [
        click.option("--backend", type=BackendChoice(),
                     help=f"Where to run (default: {DEFAULT} unless an address is set)."),
        click.option("--address", help="Ray dashboard / Jobs API address, e.g. http://head:8265 (env RAY_ADDRESS)."),
        click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
                     help="Extra HTTP header for the Jobs API (repeatable; env RAY_JOB_HEADERS as JSON)."),
        click.option("--no-verify-tls", is_flag=True, help="Do not verify the cluster's TLS certificate."),
        context_option,
    ])


def _remember_context(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        from ..jobspec.contexts import check_name

        ctx.meta[CONTEXT_KEY] = check_name(value, "--context")


# Kept out of the commands' signatures: settings_from reads it from the Click context.
context_option = click.option(
    "--context", "context_name", metavar="NAME", expose_value=False, callback=_remember_context,
    help="Use this context of ~/.config/rtjob/config.toml (rtjob context list); env RTJOB_CONTEXT.")


def job_options(func: F) -> F:
    return _apply(func, [
        click.argument("job", shell_complete=complete_job),
        click.option("--nodes", type=click.IntRange(1, 1000),
                     help="Nodes of the job's worker group (workers = nodes × GPUs per node)."),
        click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE",
                     help="Override a job field, typed by the schema, e.g. --set args.epochs=5."),
        click.option("--env", "envs", multiple=True, metavar="NAME=VALUE",
                     help="Add or override an environment variable of the job."),
        click.option("--name", help="Override the job's name."),
        click.option("--storage", help="Where the run writes checkpoints: s3://bucket/prefix or a path."),
        click.option("--compute-config", shell_complete=complete_compute_config,
                     help="Compute config name (compute_configs/NAME.yaml) or path."),
        click.option("--submission-id",
                     help="Run id; if a run with this id exists, attach to it instead of submitting again."),
        click.option("--forward-aws-credentials", is_flag=True,
                     help="Copy this client's AWS credentials (standard chain) into the job's environment, "
                          "masked everywhere; off by default."),
        click.option("--real-shape", is_flag=True,
                     help="Embedded cluster: run the job as written (its args, data, epochs), not its `local:` "
                          "profile (sized for a CPU laptop): for a workstation's GPUs."),
        *queue_options,
    ])


def _remember_queue(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None:
        ctx.meta[f"{QUEUE_KEY}.{param.name}"] = value


# Kept out of the commands' signatures, as --context is: settings_from reads them (the settings `queue`, `priority`).
queue_options = [
    click.option("--queue", metavar="NAME", expose_value=False, callback=_remember_queue,
                 help="Wait in the team's queue NAME ([queues.NAME] in the project config or a context) until the "
                      "cluster can take the whole run (docs/guide/queues.md)."),
    click.option("--priority", type=int, metavar="N", expose_value=False, callback=_remember_queue,
                 help="Priority in the queue: an integer from -1000 to 1000, higher first (default 0)."),
]


def _run_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from ..core.model import check_run_id

    return check_run_id(value, "RUN_ID")


def run_id_argument(func: F) -> F:
    """RUN_ID, checked before it reaches a URL or a path."""
    return click.argument("run_id", callback=_run_id, shell_complete=complete_run_id)(func)


OUTPUT_HELP = "json or yaml: the same data, for scripts (text: for people)."


def output_option(func: F) -> F:
    return click.option("--output", "-o", type=click.Choice(["text", "json", "yaml"]), default="text",
                        show_default=True, help=OUTPUT_HELP)(func)


def run_options(dry_run_help: str) -> Callable[[F], F]:
    """How a run is sent and followed: submit's and rerun's options after the job and the backend."""
    def decorate(func: F) -> F:
        return _apply(func, [
            click.option("--output", "-o", type=click.Choice(["text", "json", "yaml"]), default="text",
                         show_default=True, help=f"{OUTPUT_HELP} The log goes to stderr with json/yaml."),
            click.option("--dry-run", is_flag=True, help=dry_run_help),
            click.option("--no-wait", is_flag=True, help="Return as soon as the job is submitted."),
            click.option("--timeout", metavar="DURATION",
                         help="Stop following after this long (90s, 15m, 2h); exit 4, job left running. The "
                              "time a queued run waits in its queue counts too."),
            click.option("--stop-on-interrupt", is_flag=True,
                         help="Ctrl-C stops the job instead of detaching from it."),
            click.option("--explain", is_flag=True, help="With --dry-run: show where each setting came from."),
            click.option("--no-storage-check", is_flag=True,
                         help="Do not write the run's record to its storage before sending the run (the check of "
                              "the bucket, credentials, endpoint or folder; exit 3 when it fails): for a cluster "
                              "that writes with a role of its own (setting storage_check = false)."),
        ])
    return decorate


def complete_job(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    return job_names_starting(incomplete)


def complete_compute_config(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    return compute_config_names_starting(incomplete)


def complete_run_id(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    return run_ids_starting(ctx, incomplete)
