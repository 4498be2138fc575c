"""rtjob's command line: Click only. Each command parses its flags, calls one use case (runs/, storage/,
a backend's registry entry) and prints through one set of helpers (printing.py). No wire formats here.

Heavy modules (ray, pydantic specs, rich, requests) are imported inside the commands so that
`rtjob --help` stays instant.
"""

from __future__ import annotations

import sys

import click

from ..core.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, RtjobError
from . import history, mcp, notify, project, queue, repair, runs, submit, track, ui
from .anyscale import compute_config_group, schedule_group
from .completion import completion_command
from .context import context_group
from .local import local
from .options import CONTEXT, EXIT_CODES_HELP
from .printing import echo, learn_secrets_from_environment, report_crash
from .storage import pull, results


@click.group(context_settings=CONTEXT, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="rtjob", prog_name="rtjob")
@click.option("--verbose", "-v", is_flag=True,
              help="Let Ray's client log its packaging and uploads at INFO (RTJOB_VERBOSE=1 does the same).")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Submit PyTorch training jobs to Ray clusters and Anyscale from one job spec.

    \b
    Examples:
      rtjob submit ddp-resnet --nodes 2          run a job (embedded local cluster by default)
      rtjob render ddp-resnet --output json      show the exact request, send nothing
      rtjob wait RUN_ID --timeout 2h             wait with an exit code CI can trust
    """
    if verbose:  # for this command only: a caller that runs main() in its process gets its environment back
        import os

        from ..core.verbosity import VERBOSE_ENV

        before = os.environ.get(VERBOSE_ENV)
        os.environ[VERBOSE_ENV] = "1"
        ctx.call_on_close(lambda: _restore(VERBOSE_ENV, before))


def _restore(name: str, value: str | None) -> None:
    import os

    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


for _command in [submit.render, submit.submit, submit.rerun, *runs.COMMANDS, *history.COMMANDS, *notify.COMMANDS, *track.COMMANDS, *repair.COMMANDS, *project.COMMANDS, *queue.COMMANDS, *ui.COMMANDS, *mcp.COMMANDS,
                 local, compute_config_group, schedule_group, pull, results, context_group, completion_command]:
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one line per error, the documented exit codes, never a traceback on the terminal.

    A failure of rtjob itself (an unexpected exception) exits 70, which CI must not read as the job's
    outcome; its traceback is written to a file (RTJOB_DEBUG=1 prints it too), redacted like everything else."""
    learn_secrets_from_environment()
    try:
        code = cli.main(args=argv, prog_name="rtjob", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "rtjob"
        echo(f"rtjob: error: {exc.format_message()} (see {cmd} --help)", err=True)
        code = EXIT_BAD_INPUT
    except click.Abort:
        code = EXIT_INTERRUPTED
    except RtjobError as exc:
        echo(f"rtjob: error: {exc.message}", err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line and exit 70, not a traceback
        code = report_crash(exc)
    code = code if isinstance(code, int) else 0
    if argv is None and "obstore" in sys.modules:
        _exit_without_finalizing(code)
    sys.exit(code)


def _exit_without_finalizing(code: int) -> None:
    """End a process that ran obstore (pull's engine) without the interpreter's finalization: its tokio threads
    can outlive a finished command and, touching Python while the interpreter is torn down, abort the process
    (SIGABRT, exit -6, nothing on stderr) after a pull that succeeded; seen once in CI. The same pyo3/tokio race is
    known elsewhere (lancedb/lancedb#4175, pantsbuild/pants#12831). Output is flushed first; only the console
    script's own process does this (``argv`` None), never a caller that runs main in its process."""
    import contextlib
    import os

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)

