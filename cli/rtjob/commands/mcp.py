"""`rtjob mcp`: an MCP server over stdio for coding agents (cli/rtjob/mcp/). The SDK is imported inside the command
only: the rest of the CLI never loads it. Each tool runs one of rtjob's own commands in this process with
``-o json`` (``run_command``), so its answer is exactly the document that command prints, through the one redactor."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import click

from ..core.errors import EXIT_INTERNAL, BadInput, RtjobError
from .options import EXIT_CODES_HELP
from .printing import report_crash, say

if TYPE_CHECKING:
    from ..mcp.server import Answer

END_GRACE_S = 1.0  # the server exits within 2 s of its stdin closing, a tool's command still running or not
_ONE_AT_A_TIME = threading.Lock()  # a command's stdout is this process's: one tool call runs at a time


def run_command(root: click.Command, argv: list[str]) -> Answer:
    """``rtjob ARGV`` run in this process: its exit code, what it printed on stdout (captured, never the transport's)
    and its one-line error. Its stderr lines (progress, Ray's) go to this process's stderr."""
    import io
    import sys

    from ..core.errors import EXIT_BAD_INPUT
    from ..mcp.server import Answer

    with _ONE_AT_A_TIME:
        captured, saved = io.StringIO(), sys.stdout
        sys.stdout = captured
        error: str | None = None
        try:
            code = root.main(args=argv, prog_name="rtjob", standalone_mode=False)
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except click.UsageError as exc:
            code, error = EXIT_BAD_INPUT, exc.format_message()
        except RtjobError as exc:
            code, error = exc.exit_code, exc.message
        except click.Abort:
            code, error = EXIT_INTERNAL, "interrupted"
        except Exception as exc:  # noqa: BLE001 - rtjob's own failure: one line, its traceback in a file (exit 70)
            sys.stdout = saved
            code = report_crash(exc)
            error = f"rtjob failed ({type(exc).__name__}); its traceback is in $RTJOB_HOME/crash/"
        finally:
            sys.stdout = saved
    return Answer(code if isinstance(code, int) else 0, captured.getvalue(), error)


@click.command(epilog=EXIT_CODES_HELP)
@click.option("--allow-submit", is_flag=True, help="Add the submit tool: named jobs of this project only, "
                                                   "answered at once (submit --no-wait).")
@click.option("--allow-stop", is_flag=True, help="Add the stop tool: a run is stopped only with the confirmation "
                                                 "token a first call answered.")
@click.pass_context
def mcp(ctx: click.Context, allow_submit: bool, allow_stop: bool) -> None:
    """Serve rtjob to coding agents over MCP (stdio): jobs, render, runs, status, logs, results, wait; read-only
    unless allowed more. Each answer is the JSON document the command prints with -o json.

    \b
    Examples:
      rtjob mcp                                   read-only tools
      rtjob mcp --allow-submit                    and submit (named jobs, answered at once)
      rtjob mcp --allow-submit --allow-stop       and stop (with a confirmation token)
    """
    try:
        from ..mcp.server import build
    except ImportError as exc:
        raise BadInput(f"rtjob mcp needs the mcp extra ({exc.name} is missing): pip install 'rtjob[mcp]'") from None
    root = ctx.find_root().command
    server = build(lambda argv: run_command(root, argv), allow_submit=allow_submit, allow_stop=allow_stop)
    say("mcp: serving on stdio (stdin closed ends it)")
    server.run("stdio")
    _end_promptly()


def _end_promptly() -> None:
    """The session is over (stdin closed). A command still running in its abandoned worker thread (a wait of up to
    30 s) is given END_GRACE_S to finish; then the process ends at once, without the interpreter's teardown (the
    threads a command left, modules' exit hooks, seconds on a loaded machine), as a killed rtjob would: the server is
    gone within 2 s of its stdin closing. Everything rtjob writes is written atomically (records, the ledger's
    transactions), so nothing is left half-written."""
    import os
    import sys

    if not _ONE_AT_A_TIME.acquire(timeout=END_GRACE_S):
        say("mcp: stdin closed while a tool ran; ending without its answer")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


COMMANDS = [mcp]
