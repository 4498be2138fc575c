"""Cron checks for scheduled runs: five fields, `minute hour day-of-month month day-of-week`, the form Anyscale
schedules and GitHub Actions both take, and GitHub's narrower rules (POSIX cron, at most every 5 minutes, an
IANA time zone). Checked here (croniter, zoneinfo) before anything is sent or written."""

from __future__ import annotations

import datetime as dt
import itertools
import re

from ..core import clock
from ..core.errors import BadInput

CRON_FORM = "5 fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * 1'"
_FIELD = re.compile(r"^[0-9A-Za-z*,/\-]+$")


def validate_cron(expr: str, flag: str = "--cron") -> str:
    """The expression, whitespace-normalised; BadInput (exit 2) unless it is a valid 5-field cron."""
    text = " ".join((expr or "").split())
    fields = text.split(" ") if text else []
    if len(fields) != 5 or not all(_FIELD.match(f) for f in fields):
        raise BadInput(f"{flag} {expr!r}: not a cron expression ({CRON_FORM})")
    from croniter import croniter

    if not croniter.is_valid(text):
        raise BadInput(f"{flag} {expr!r}: not a valid cron expression ({CRON_FORM})")
    return text


def validate_timezone(name: str, flag: str = "--timezone") -> str:
    """'UTC', 'local' or an IANA name such as 'Europe/Berlin'."""
    if name in ("UTC", "local"):
        return name
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadInput(f"{flag} {name!r}: not a time zone; use UTC, local or an IANA name like Europe/Berlin") from None
    return name


def next_runs(cron: str, timezone: str = "UTC", count: int = 3, now: dt.datetime | None = None) -> list[str]:
    """The next ``count`` trigger times of ``cron`` in ``timezone``, as ISO 8601 with offsets."""
    import zoneinfo

    from croniter import croniter

    if timezone == "local":
        start = (now or clock.now()).astimezone()
    else:
        start = (now or clock.now()).astimezone(zoneinfo.ZoneInfo(timezone))
    it = croniter(cron, start)
    return [it.get_next(dt.datetime).isoformat(timespec="minutes") for _ in range(count)]


# GitHub Actions runs POSIX cron only (docs: "workflow syntax, on.schedule"): no seconds field, no @nicknames, no
# Quartz/Jenkins extensions (L, W, #, ?, H) that croniter would accept, and at most one run every 5 minutes.
GITHUB_CRON_FORM = ("GitHub runs POSIX cron: 5 fields (minute hour day-of-month month day-of-week) of numbers, *, "
                    "',', '-' and '/', months JAN-DEC and days SUN-SAT by name, at most once every 5 minutes, "
                    "e.g. '*/30 6-18 * * MON-FRI'")
GITHUB_MIN_INTERVAL_MIN = 5
_NAMES = {3: "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC", 4: "SUN|MON|TUE|WED|THU|FRI|SAT"}
_EXTENSIONS = {"L": "L (last)", "W": "W (nearest weekday)", "#": "# (nth weekday)", "?": "? (no value)",
               "H": "H (hashed)"}


def _github_only(text: str, expr: str, flag: str) -> None:
    """BadInput for the forms croniter takes and GitHub does not run."""
    fields = text.split(" ") if text else []
    if text.startswith("@"):
        raise BadInput(f"{flag} {expr!r}: GitHub Actions does not run {fields[0]}; {GITHUB_CRON_FORM}")
    if len(fields) in (6, 7):
        raise BadInput(f"{flag} {expr!r}: {len(fields)} fields (seconds or years?); {GITHUB_CRON_FORM}")
    for index, field in enumerate(fields[:5]):
        rest = re.sub(_NAMES[index], "", field.upper()) if index in _NAMES else field.upper()
        odd = sorted(set(rest) & set(_EXTENSIONS))  # other letters: croniter says what is wrong
        if odd:
            what = ", ".join(_EXTENSIONS[c] for c in odd)
            raise BadInput(f"{flag} {expr!r}: GitHub Actions does not run {what}; {GITHUB_CRON_FORM}")


def _expanded(field: list[int | str], everything: range) -> list[int]:
    return list(everything) if field == ["*"] else sorted(int(v) for v in field)


def runs_too_often(cron: str, minutes: int = GITHUB_MIN_INTERVAL_MIN) -> bool:
    """Whether two runs of a valid 5-field ``cron`` can fall less than ``minutes`` apart: time-of-day
    arithmetic, and a scan of the days only when the two runs are either side of midnight."""
    from croniter import croniter

    fields = croniter.expand(cron)[0]
    times = sorted(h * 60 + m for h in _expanded(fields[1], range(24)) for m in _expanded(fields[0], range(60)))
    if any(b - a < minutes for a, b in itertools.pairwise(times)):
        return True
    return 24 * 60 - times[-1] + times[0] < minutes and _runs_on_consecutive_days(cron)


def _runs_on_consecutive_days(cron: str) -> bool:
    from croniter import croniter

    days = "0 0 " + " ".join(cron.split(" ")[2:])  # the day fields alone (day-of-month OR day-of-week, as cron)
    it = croniter(days, dt.datetime(2026, 1, 1))
    previous = it.get_next(dt.datetime)
    for _ in range(2000):  # years of runs for any schedule that runs on two days in a row at all
        current = it.get_next(dt.datetime)
        if current - previous == dt.timedelta(days=1):
            return True
        previous = current
    return False


def validate_github_cron(expr: str, flag: str = "--cron") -> str:
    """The expression, whitespace-normalised; BadInput (exit 2) unless GitHub Actions runs it as written."""
    text = " ".join((expr or "").split())
    _github_only(text, expr, flag)
    try:
        text = validate_cron(text, flag)
    except BadInput:
        raise BadInput(f"{flag} {expr!r}: not a valid cron expression; {GITHUB_CRON_FORM}") from None
    from croniter import CroniterBadDateError, croniter

    try:
        croniter(text, dt.datetime(2026, 1, 1)).get_next(dt.datetime)
    except CroniterBadDateError:
        raise BadInput(f"{flag} {expr!r}: never runs (no such date); {GITHUB_CRON_FORM}") from None
    if runs_too_often(text):
        raise BadInput(f"{flag} {expr!r}: has runs less than {GITHUB_MIN_INTERVAL_MIN} minutes apart, GitHub's "
                       f"shortest interval; {GITHUB_CRON_FORM}")
    return text


def validate_iana_timezone(name: str, flag: str = "--timezone") -> str:
    """An IANA time zone name (what GitHub's `on.schedule[].timezone` takes); not 'local'."""
    import zoneinfo

    valid = "use an IANA time zone name like Europe/Berlin or America/New_York (UTC: the default)"
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*", name or ""):
        raise BadInput(f"{flag} {name!r}: not an IANA time zone name; {valid}")
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadInput(f"{flag} {name!r}: not an IANA time zone; {valid}") from None
    return name
