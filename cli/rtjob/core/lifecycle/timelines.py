"""Each attempt's own start-up timeline (``record.timelines``: attempt id -> stage -> ISO time, to the
millisecond), and the run's: its last attempt's (``record.timeline``, which the kernel keeps equal to it, so a
reader that knows only the one timeline reads the last attempt's). Earlier attempts are listed under it
(``earlier``: attempt n, its end, its duration).

An older record holds one timeline merged across its attempts and no ``timelines``: it reads as its last
attempt's, and the first transition a newer kernel applies to it keeps it so (``_seeded``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import parse
from ..record import RunRecord


def last_attempt(record: RunRecord) -> str:
    """The id of the record's latest attempt (the highest number in its attempts; none listed: the run's own id,
    its first attempt's)."""
    numbered = [a for a in record.attempts if isinstance(a, dict) and isinstance(a.get("attempt"), int) and a.get("id")]
    return str(max(numbered, key=lambda a: a["attempt"])["id"]) if numbered else record.id


def _seeded(record: RunRecord) -> None:
    if not record.timelines and record.timeline:
        record.timelines = {last_attempt(record): dict(record.timeline)}


def derive(record: RunRecord) -> None:
    """``record.timeline``: its last attempt's (an older record's merged one while it has no per-attempt ones)."""
    _seeded(record)
    if record.timelines:
        record.timeline = dict(record.timelines.get(last_attempt(record), {}))


def stage(record: RunRecord, attempt_id: str | None, name: str, at: str) -> None:
    """Stage ``name`` of attempt ``attempt_id`` (None: the latest) at ``at``, unless that attempt noted it already."""
    _seeded(record)
    record.timelines.setdefault(attempt_id or last_attempt(record), {}).setdefault(name, at)
    derive(record)


def merged(mine: dict[str, dict[str, str]], stored: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Two writers' per-attempt timelines as one: within an attempt, the earliest time of a stage (its first
    sighting); an attempt's stages never mix with another's."""
    out = {attempt: dict(stages) for attempt, stages in mine.items()}
    for attempt, stages in stored.items():
        into = out.setdefault(attempt, {})
        for name, when in stages.items():
            if name not in into or when < into[name]:
                into[name] = when
    return out


@dataclass(frozen=True)
class EarlierAttempt:
    """An attempt before the last one, as a run's timeline lists it under its own."""

    number: int
    id: str
    status: str | None
    ended: str | None
    duration_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.number, "id": self.id, "status": self.status, "ended": self.ended,
                "duration_s": self.duration_s}


def _duration(stages: dict[str, str]) -> float | None:
    try:
        first = min(parse(when) for when in stages.values())
        return round((parse(stages["ended"]) - first).total_seconds(), 3)
    except (KeyError, ValueError):
        return None


def earlier(record: RunRecord) -> list[EarlierAttempt]:
    """The attempts before the last one, in order: each one's end and duration (from its own timeline: its first
    stage to its end; None where it kept none)."""
    last = last_attempt(record)
    out = []
    for entry in sorted((a for a in record.attempts if isinstance(a, dict) and a.get("id") and a.get("id") != last),
                        key=lambda a: a.get("attempt") or 0):
        stages = record.timelines.get(str(entry["id"]), {})
        out.append(EarlierAttempt(int(entry.get("attempt") or 0), str(entry["id"]), entry.get("status"),
                                  stages.get("ended"), _duration(stages)))
    return out
