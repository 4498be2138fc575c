"""One clock: every time rtjob records is UTC, written as ISO 8601 (what records, index entries, markers and the
ledger hold); `core.model.stamp` is how a command prints one. Stdlib only: the run side imports it too."""

from __future__ import annotations

import datetime as dt


def now() -> dt.datetime:
    """The current moment, timezone-aware UTC."""
    return dt.datetime.now(dt.timezone.utc)


def now_iso(timespec: str = "milliseconds") -> str:
    """The current moment as a record keeps it ("2026-11-27T10:06:08.123+00:00"); ``timespec`` as isoformat's."""
    return now().isoformat(timespec=timespec)


def parse(when: str) -> dt.datetime:
    """A recorded time back as an aware datetime (a naive one is UTC: rtjob records UTC; "Z" is accepted)."""
    moment = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


def earliest(*stamps: str | None) -> str | None:
    """The earliest of recorded times as it was written (None and unreadable ones skipped; None if none is left):
    a run's start whoever saw it first, the same whichever order its writers came in."""
    known: list[tuple[dt.datetime, str]] = []
    for stamp in filter(None, stamps):
        try:
            known.append((parse(stamp), stamp))
        except ValueError:
            continue
    return min(known, key=lambda pair: pair[0])[1] if known else None
