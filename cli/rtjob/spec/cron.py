"""Cron checks for scheduled runs: five fields, `minute hour day-of-month month day-of-week`, the form Anyscale
schedules and GitHub Actions both take. Checked here (croniter) before anything is sent."""

from __future__ import annotations

import datetime as dt
import re

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
        start = (now or dt.datetime.now(dt.timezone.utc)).astimezone()
    else:
        start = (now or dt.datetime.now(dt.timezone.utc)).astimezone(zoneinfo.ZoneInfo(timezone))
    it = croniter(cron, start)
    return [it.get_next(dt.datetime).isoformat(timespec="minutes") for _ in range(count)]
