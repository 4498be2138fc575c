"""`rtjob completion bash|zsh|fish`, and what the shell completes: job names, compute config names, run ids.

Click answers the shell through the ``_RTJOB_COMPLETE`` environment variable (its protocol); these
callbacks only choose the words. Completion runs on every Tab: it never prints an error and never waits
long, so a broken project or an unreachable cluster completes nothing rather than something noisy.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click
from click.shell_completion import CompletionItem, get_completion_class

from ..core.errors import EXIT_SUCCEEDED
from .printing import echo

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_RTJOB_COMPLETE"
# Run ids come from the backend's list: a slow or unreachable cluster gets this long, then nothing.
RUN_ID_TIMEOUT_S = 2.0


def _quiet_names(names: Callable[[], list[str]], incomplete: str) -> list[CompletionItem]:
    try:
        found = names()
    except Exception:  # noqa: BLE001 - completion never prints an error: a broken project completes nothing
        return []
    return [CompletionItem(name) for name in found if name.startswith(incomplete)]


def _looks_like_path(incomplete: str) -> bool:
    return "/" in incomplete or incomplete.startswith((".", "~"))


def job_names_starting(incomplete: str) -> list[CompletionItem]:
    """The project's job names; a path (``./x``, ``jobs/``) completes as a file."""
    if _looks_like_path(incomplete):
        return [CompletionItem(incomplete, type="file")]
    from ..jobspec.project import find_root, job_names

    return _quiet_names(lambda: job_names(find_root()), incomplete)


def compute_config_names_starting(incomplete: str) -> list[CompletionItem]:
    if _looks_like_path(incomplete):
        return [CompletionItem(incomplete, type="file")]
    from ..jobspec.project import compute_config_names, find_root

    return _quiet_names(lambda: compute_config_names(find_root()), incomplete)


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Libraries may log to fd 2 (Ray, the Anyscale SDK): while completing, nothing reaches the terminal."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _within(seconds: float, call: Callable[[], list[str]]) -> list[str]:
    """``call()`` if it answers within ``seconds`` without an error; else nothing (the thread is left to die
    with the process: completion exits right after answering)."""
    found: list[str] = []

    def run() -> None:
        with contextlib.suppress(BaseException):
            found.extend(call())

    worker = threading.Thread(target=run, daemon=True, name="rtjob-complete-run-ids")
    worker.start()
    worker.join(seconds)
    return list(found) if not worker.is_alive() else []


def run_ids_starting(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """Run ids from the configured backend's list (the --backend/--address given so far on the line)."""
    from .settings import backend_from

    params: dict[str, Any] = ctx.params

    def listed() -> list[str]:
        from click.globals import pop_context, push_context

        push_context(ctx)  # this thread's own Click context stack: settings_from reads --context from it
        try:
            be = backend_from(params.get("backend"), params.get("address"), tuple(params.get("headers") or ()),
                              bool(params.get("no_verify_tls")))
        finally:
            pop_context()
        return [run.id for run in be.list()]

    with _stderr_silenced():
        ids = _within(RUN_ID_TIMEOUT_S, listed)
        ids += [run_id for run_id in _within(RUN_ID_TIMEOUT_S, remembered) if run_id not in ids]
    return [CompletionItem(run_id) for run_id in ids if run_id.startswith(incomplete)]


def remembered() -> list[str]:
    """The run ledger's newest runs: ids of runs whose cluster is gone complete too."""
    from ..ledger import Ledger

    with Ledger.default() as book:  # its own connection: this runs on the completion thread
        return [row["id"] for row in book.summaries(limit=200)]


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> int:
    """Print the shell completion script for SHELL: commands, options, job names, compute configs, run ids.

    \b
    Examples:
      eval "$(rtjob completion bash)"          # in ~/.bashrc
      eval "$(rtjob completion zsh)"           # in ~/.zshrc
      rtjob completion fish > ~/.config/fish/completions/rtjob.fish
    """
    script_class = get_completion_class(shell)
    assert script_class is not None  # every name in SHELLS is one of Click's
    root = ctx.find_root()
    script = script_class(root.command, {}, root.info_name or "rtjob", COMPLETE_VAR).source()
    echo(script, nl=not script.endswith("\n"))
    return EXIT_SUCCEEDED
