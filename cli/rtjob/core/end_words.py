"""An end's one line in rtjob's words: what `status`, a followed submit's last line and the UI's cards say of why a
run ended. Ray's message for a failed job is its job manager's sentence, then the log's tail: the driver log's INFO
lines, the "Running entrypoint ... python -m rtjob.runside.companion ..." line of the wrapper rtjob runs, the
user's own output. The log is printed elsewhere (`rtjob logs`); here only the cause stays. Pure and stdlib only:
the kernel's verdict calls it too."""

from __future__ import annotations

import re

from .secret_refs import NOT_STARTED

COMPANION_PREFIX = "rtjob companion:"  # the companion's own lines (runside/companion.py's say(), runside/logparts.py)

# Ray's texts that only restate a status (ray.dashboard.modules.job.common.JobInfo.__post_init__): nothing to add.
_STATE_TEXTS = ("Job has not started yet", "Job is currently running", "Job was intentionally stopped",
                "Job finished successfully", "Job failed.")

# Lines of Ray's machinery, not of the run: the job manager's and the driver logger's timestamped lines
# ("2026-12-02 13:04:05,123\tINFO job_manager.py:568 -- Runtime env is setting up."), the supervisor's
# "Running entrypoint for job ...: <command>", the companion wrapper's command line, the log-tail announcement.
_MACHINERY = (
    re.compile(r"^\s*\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.\d]*\s+(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"),
    re.compile(r"^\s*\(\w+ pid=\d+(, ip=[\d.]+)?\)\s*$"),
    re.compile(r"^\s*Running entrypoint for job\b"),
    re.compile(r"rtjob\.runside\.companion\b"),
    re.compile(r"^\s*-+\s*$"),
)

_LOG_TAIL = re.compile(r",?\s*last available logs \(truncated to [\d,]+ chars\):?.*$", re.DOTALL)

# Ray's job-manager sentences, said as rtjob says them; group "rest" is what follows (the cause, when Ray gives one).
_RAY_SENTENCES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^Job entrypoint command failed with exit code (?P<code>-?\d+)"),
     "the entrypoint exited with code {code}"),
    (re.compile(r"^Job supervisor actor failed to start within (?P<secs>[\d.]+) seconds"),
     "its driver did not start within {secs} s (RAY_JOB_START_TIMEOUT_SECONDS)"),
    (re.compile(r"^Job supervisor actor died:?\s*(?P<rest>.*)", re.DOTALL), "its driver was lost"),
    (re.compile(r"^Job supervisor actor could not be scheduled:?\s*(?P<rest>.*)", re.DOTALL),
     "its driver could not be scheduled"),
    (re.compile(r"^Unexpected error occurred: failed to get job supervisor"), "its driver did not start"),
    (re.compile(r"^runtime_env setup failed:?\s*(?P<rest>.*)", re.DOTALL), "its runtime environment failed to set up"),
    (re.compile(r"^Unexpected error occurred:?\s*(?P<rest>.*)", re.DOTALL), "Ray failed"),
)

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Warning)\b:?")
LINE_MAX = 240  # the end's line is one line a table cell holds


def end_line(message: str | None, status: str | None = None) -> str | None:
    """The one line that says why a run ended, or None when ``message`` says nothing a status does not
    (Ray's "Job finished successfully.") or nothing at all. ``status`` is the run's: a SUCCEEDED run keeps no
    failure of Ray's (an earlier attempt's, left in its message), only rtjob's own lines. At most LINE_MAX
    characters, so every view (status, the verdict's JSON, the UI) says the same line."""
    said = _end_line(message, status)
    return said if not said or len(said) <= LINE_MAX else said[:LINE_MAX - 1] + "…"


def _end_line(message: str | None, status: str | None) -> str | None:
    text = (message or "").strip()
    if not text or text.startswith(_STATE_TEXTS):
        return None
    for pattern, words in _RAY_SENTENCES:
        found = pattern.match(text)
        if found:
            if status == "SUCCEEDED":
                return None
            said = words.format(**found.groupdict())
            cause = _cause(found.groupdict().get("rest") or "") or _not_started(text)
            return f"{said}: {cause}" if cause else said
    return _cause(text)


def _not_started(text: str) -> str | None:
    """The companion's line, in the log's tail, saying why the script never ran (a secret it could not resolve)."""
    for line in text.splitlines():
        own = line.strip().removeprefix(COMPANION_PREFIX).strip()
        if own != line.strip() and own.endswith(NOT_STARTED):
            return own
    return None


def _cause(text: str) -> str | None:
    """The first meaningful line of ``text``; for a Python traceback, its exception line (the last that names one),
    which says what the first ("Traceback (most recent call last):") does not."""
    lines = [line.strip() for line in _LOG_TAIL.sub("", text).splitlines()]
    meaningful = [line for line in lines if line and not any(p.search(line) for p in _MACHINERY)]
    if not meaningful:
        return None
    if meaningful[0].startswith("Traceback (most recent call last)"):
        raised = [line for line in meaningful if _EXCEPTION_LINE.match(line)]
        if raised:
            return raised[-1]
    return meaningful[0]
