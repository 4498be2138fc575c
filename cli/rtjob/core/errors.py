"""Errors that map to rtjob's exit codes.

Every error the CLI reports is one of these: the Click front prints its message on one line and exits
with its code, never a traceback.
"""

from __future__ import annotations

# Exit codes (README and `rtjob --help` list the same table).
EXIT_SUCCEEDED = 0
EXIT_FAILED = 1  # the job failed or was stopped
EXIT_BAD_INPUT = 2  # usage, validation, unknown job or run, a job that can never fit (or a run that waits in vain)
EXIT_UNREACHABLE = 3  # cluster or storage unreachable, authentication failed, or a run's outputs not stored
EXIT_WAIT_TIMEOUT = 4  # rtjob stopped following; the job is left running
EXIT_INTERNAL = 70  # rtjob itself failed (a bug, not the run's outcome): sysexits' EX_SOFTWARE
EXIT_INTERRUPTED = 130  # Ctrl-C while following: detached, the job is left running


class RtjobError(Exception):
    """An error with a one-line message and an exit code. Unclassified, it is rtjob's own failure (70): only
    RunFailed says "the run failed" (1), so CI never mistakes a tool problem for the job's outcome."""

    exit_code = EXIT_INTERNAL
    retriable = False  # True: a fault that may pass (a follower retries it, with a bound, before giving up)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RunFailed(RtjobError):
    """The run's outcome is a failure that rtjob reports as such (e.g. a retry that cannot be made)."""

    exit_code = EXIT_FAILED


class BadInput(RtjobError):
    exit_code = EXIT_BAD_INPUT


class Unreachable(RtjobError):
    exit_code = EXIT_UNREACHABLE


class StorageError(Unreachable):
    """Storage failed (exit 3), typed so that every writer and reader treats a fault alike: ``transient`` (connection
    refused or reset, a time-out, HTTP 5xx, SlowDown: may pass, so it is retried with backoff) or permanent (no such
    bucket, access denied, bad or no credentials: retrying changes nothing). The message is one line naming the
    storage and what failed, never a credential."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient
        self.retriable = transient


class OutputsNotStored(Unreachable):
    """The run ended, but its files or its end did not reach its storage within the storage grace: an environment
    fault, not the script's (exit 3). The copy is kept on the node; ``rtjob sync ID`` stores it."""


class WaitTimeout(RtjobError):
    exit_code = EXIT_WAIT_TIMEOUT


def one_line(exc: BaseException) -> str:
    """``exc`` as one line for a printed note or a log: an RtjobError's message, else its type and the first line of
    its text ("OSError: [Errno 28] No space left on device"), or its type alone when it has no text."""
    message = getattr(exc, "message", None)
    if isinstance(message, str) and message.strip():
        return message.strip().splitlines()[0]
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
