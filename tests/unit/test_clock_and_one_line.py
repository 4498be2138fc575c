"""core/clock.py (one UTC clock: what records, markers and the ledger hold) and core/errors.one_line (an exception
as one line for a note or a log)."""

from __future__ import annotations

import datetime as dt

import pytest
from rtjob.core import clock
from rtjob.core.errors import BadInput, RtjobError, one_line


def test_now_is_aware_utc() -> None:
    before = dt.datetime.now(dt.timezone.utc)
    moment = clock.now()
    assert moment.utcoffset() == dt.timedelta(0)
    assert before <= moment <= dt.datetime.now(dt.timezone.utc)


def test_now_iso_keeps_the_precision_asked_and_parses_back() -> None:
    ms, seconds = clock.now_iso(), clock.now_iso("seconds")
    assert ms.endswith("+00:00") and len(ms.split("T")[1]) == len("10:06:08.123+00:00")
    assert len(seconds.split("T")[1]) == len("10:06:08+00:00")
    assert abs((clock.parse(ms) - clock.now()).total_seconds()) < 60
    assert clock.parse(seconds).tzinfo is not None


def test_parse_reads_z_and_takes_a_naive_time_as_utc() -> None:
    utc = dt.datetime(2026, 11, 27, 10, 6, 8, tzinfo=dt.timezone.utc)
    assert clock.parse("2026-11-27T10:06:08Z") == utc
    assert clock.parse("2026-11-27T10:06:08") == utc
    assert clock.parse("2026-11-27T11:06:08+01:00") == utc
    with pytest.raises(ValueError):
        clock.parse("yesterday")


def test_one_line() -> None:
    assert one_line(BadInput("storage 'x': use a URI")) == "storage 'x': use a URI"  # an RtjobError's message
    assert one_line(RtjobError("first line\nsecond line")) == "first line"
    assert one_line(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"
    assert one_line(ValueError("\n  bad lr 0.5  \n  detail\n")) == "ValueError: bad lr 0.5"  # first non-blank
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"  # no text: the type alone
    assert one_line(ValueError("   ")) == "ValueError"
    assert one_line(RtjobError("")) == "RtjobError"  # an empty message: as any exception without text
