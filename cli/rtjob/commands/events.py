"""How the CLI tells what a run's use cases report (runs/events.RunEvents): each fact as the line rtjob prints
on stderr, and a followed run's end as its exit code."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO, cast

from ..core.end_words import end_line
from ..core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_SUCCEEDED
from ..core.redact import redact
from .printing import duration, echo, outcome, outputs_line, print_data, run_document, say

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..backends.base import Retry
    from ..core.model import RunInfo
    from ..runs.lifecycle.follow import Followed
    from ..runs.runner import Plan, Submitted


class Printed:
    """RunEvents as rtjob's stderr lines."""

    def note(self, text: str) -> None:
        say(text)

    def warning(self, text: str) -> None:
        say(f"warning: {text}")

    def submitted(self, planned: Plan, done: Submitted) -> None:
        job, info, backend = planned.job, done.run, planned.backend
        for note in planned.notes:
            say(f"note: {note}")
        if planned.pipeline is not None:  # a step: the step line before it named the pipeline and the job
            verb = "submitted" if done.created else f"attaching to ({info.status.value})"
            say(f"{verb} {job.run_id} ({backend.name}, {job.shape_summary()}; storage {job.storage_uri})")
        elif done.created:
            say(f"submitted {job.spec.name} as {info.id} ({backend.name}, {job.shape_summary()}; "
                f"storage {info.storage_uri or '-'})")
            hourly = planned.cost
            if hourly is not None:
                say(f"cost: {hourly.text()}")
        else:
            say(f"run {info.id} already exists ({info.status.value}); attaching instead of submitting again")

    def status(self, info: RunInfo) -> None:
        say(f"{info.id}: {info.status.value}")

    def retrying(self, failed: str, decision: Retry) -> None:
        assert decision.next_run is not None
        verb = "submitted" if decision.created else "attaching to"
        say(f"{failed} FAILED: {decision.reason}; retry {decision.attempt}/{decision.max_retries}: {verb} "
            f"{decision.next_run.id} (same run name and storage: training resumes from its last checkpoint)")

    def ended(self, info: RunInfo) -> None:
        line = end_line(info.message, info.status.value) if info.status.value != "SUCCEEDED" else None
        message = f": {line}" if line else ""
        say(f"{info.id} {info.status.value} after {duration(info)}{redact(message, info.secrets)}")
        lost = outputs_line(info)
        if lost is not None:
            say(lost)

    def detached(self, run_id: str) -> None:
        say(f"detached; {run_id} keeps running. Re-attach: rtjob logs {run_id} --follow  (or rtjob wait {run_id})")


PRINTED = Printed()

def log_stream(output: str, raw: bool = False) -> TextIO:
    """Where a followed run's log goes: stdout, or stderr when stdout carries -o json/yaml; the user's view of it
    (runs/logview.py) unless ``raw``."""
    from ..runs.logview import UserView

    out = sys.stdout if output == "text" else sys.stderr
    return out if raw else cast("TextIO", UserView(out))  # a text stream: write and flush are what followers use


def exit_code(followed: Followed) -> int:
    """A followed run's exit code: 130 detached, 1 stopped on Ctrl-C, the error's when rtjob stopped following,
    else its outcome."""
    from ..runs.lifecycle.follow import Abandoned, Detached

    if isinstance(followed, Detached):
        return EXIT_INTERRUPTED
    if isinstance(followed, Abandoned):
        return followed.error.exit_code
    return EXIT_FAILED if followed.stopped else outcome(followed.run)


def followed_error(followed: Followed | None) -> str | None:
    """Why rtjob stopped following before the run's end (the one line it prints as its error), None if it did not."""
    from ..runs.lifecycle.follow import Abandoned, Detached

    if isinstance(followed, Detached):
        return f"interrupted: {followed.run_id} was left running"
    if isinstance(followed, Abandoned):
        return followed.error.message
    return None


def finish(followed: Followed | None) -> int:
    """The exit code of a follow whose outcome was printed; an error that ended it is raised (one line, its code)."""
    from ..runs.lifecycle.follow import Abandoned

    if isinstance(followed, Abandoned):
        raise followed.error
    return exit_code(followed) if followed is not None else EXIT_SUCCEEDED


def print_followed(followed: Followed, output: str, known: RunInfo) -> int:
    """A single run followed to its end or as far as rtjob followed it: its -o json/yaml document (the run as last
    seen, else as ``known``, with the error that ended the follow; the outcome line was told), its exit code. The
    document carries the run's ``verdict`` as `status -o json` does (an end: the archived record's)."""
    if output != "text":
        run = followed.run if followed.run is not None else known
        error = followed_error(followed)
        print_data({**run_document(run), **({"error": error} if error else {})}, output)
    return finish(followed)


def print_log(chunks: Iterable[str], secrets: list[str], tail_lines: int | None, raw: bool) -> None:
    """A log's chunks, masked: the user's view of them (runs/logview.py) unless ``raw``; ``tail_lines``: its last
    N lines (``chunks`` were read with some slack, for the lines the view hides)."""
    from ..runs.logview import user_chunks, user_tail

    if raw:
        shown: Iterable[str] = chunks
    elif tail_lines:
        shown = [user_tail(chunks, tail_lines)]
    else:
        shown = user_chunks(chunks)
    for text in shown:
        echo(redact(text, secrets), nl=False)
