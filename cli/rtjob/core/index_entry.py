"""The one schema of a run's index entry: what the team's index lists of a run (core/lifecycle.write writes one at
each status change, through its IndexPort), and what the UI's runs table shows of a run from the ledger too. Stdlib
and rtjob.core only: the cluster imports it (the companion and the supervisor write entries)."""

from __future__ import annotations

import math
from typing import Any

from . import clock
from .queueing import Place
from .record import RunRecord
from .verdict import end_reason, of_entry, recorded_state

# The fields `rtjob runs` prints and filters on: RunRecord.summary()'s keys, and user, pipeline.
FIELDS = ("id", "job", "backend", "status", "message", "start_time", "end_time", "storage_uri", "exit_code",
          "address", "submitted_at", "updated_at", "archived", "git_commit", "git_dirty", "cost_usd", "user",
          "pipeline")
# What an entry holds besides: the number of attempts so far, the run's duration (None until it has both ends), its
# tags and its job's args (the job document's, then its --set overrides: what the run ran with; secrets are masked
# in the recorded spec already) and its final metrics (the last epoch row's numbers, the epoch itself left out).
# What the run's verdict needs (core/verdict.of_entry): who carries it and when it was last seen (a listing reads
# the record of a run not ended for its latest beat), who wrote its end, the end's reason, whether its outputs are
# all stored; so the team's list says what `status` says.
DETAILS = ("attempts", "duration_s", "tags", "args", "final_metrics", "carried_by", "last_seen", "completed_by",
           "reason", "outputs", "queue")  # queue: a queued run's ({"name", "priority", "storage"})


def entry_of(record: RunRecord) -> dict[str, Any]:
    """The run's listed fields and its DETAILS."""
    last = (record.metrics or {}).get("last") if isinstance(record.metrics, dict) else None
    finals = {k: v for k, v in (last or {}).items() if k != "epoch" and _number(v)} if isinstance(last, dict) else {}
    status, message, exit_code = recorded_state(record)  # a retried run: one story, its last attempt's end
    told = {"status": status.value, "message": message, "exit_code": exit_code}
    return {**record.summary(), **told, "user": record.user, "pipeline": record.pipeline,
            "attempts": len(record.attempts) or 1,
            "duration_s": duration_s(record.start_time or record.submitted_at, record.end_time),
            "tags": {k: str(v) for k, v in recorded_part(record, "tags").items()},
            "args": recorded_part(record, "args"), "final_metrics": finals,
            "carried_by": record.carried_by, "last_seen": record.last_seen, "completed_by": record.completed_by,
            "reason": end_reason(record).value, "outputs": record.outputs, "queue": record.queue}


# What a ledger row keeps beside RunRecord.summary() so `rtjob runs -o json` says the verdict without the record:
# the told state (a retried run's last attempt) and these.
VERDICT_INPUTS = ("attempts", "carried_by", "last_seen", "completed_by", "reason", "outputs", "queue")


def ledger_summary(record: RunRecord) -> dict[str, Any]:
    """The ledger's summary column: the record's summary with its verdict's inputs (as its index entry has them);
    an ended run's verdict too, which no clock changes (a listing of 10,000 runs computes none of theirs)."""
    entry = entry_of(record)
    row = {**record.summary(), **{k: entry[k] for k in ("status", "message", "exit_code", *VERDICT_INPUTS)}}
    if record.run_status.terminal:
        row["verdict"] = of_entry(row).to_json()
    return row


def summary_said(row: dict[str, Any], now: Any = None) -> dict[str, Any]:
    """A ledger row as `rtjob runs -o json` prints it: RunRecord.summary()'s keys and the run's verdict (a row saved
    before it kept the inputs: its verdict from its status alone)."""
    verdict = row.get("verdict") or of_entry(row, now).to_json()
    said = dict(row)
    for key in VERDICT_INPUTS:
        said.pop(key, None)
    said["verdict"] = verdict
    return said


def seen_row(row: dict[str, Any], now: Any = None, place: Place | None = None) -> dict[str, Any]:
    """A listed row as its run's verdict says it (core/verdict.py): status, message, times, duration, attempts,
    reason and line as `status` prints them; a queued run's position (``place``: its queue's word)."""
    seen = of_entry(row, now, place=place)
    return {**row, "status": seen.status.value, "message": seen.message, "start_time": seen.started,
            "end_time": seen.ended, "duration_s": seen.duration_s, "attempts": seen.attempts,
            "reason": seen.reason.value, "line": seen.line, "carried_by": row.get("carried_by"),
            "last_seen": seen.last_seen, "outputs_complete": seen.outputs_complete,
            "position": seen.place.position if seen.place is not None else None}


def recorded_part(record: RunRecord, name: str) -> dict[str, Any]:
    """``args`` or ``tags`` as the run's recorded spec holds them (the job document, then its --set overrides)."""
    spec = record.spec if isinstance(record.spec, dict) else {}
    document = spec.get("document")
    found = document.get(name) if isinstance(document, dict) else None
    out: dict[str, Any] = {str(k): v for k, v in found.items()} if isinstance(found, dict) else {}
    overrides = spec.get("overrides")
    for item in (overrides.get("sets") if isinstance(overrides, dict) else None) or []:
        key, eq, value = str(item).partition("=")
        if eq and key.startswith(f"{name}."):
            out[key[len(name) + 1:]] = value
    return out


def duration_s(start: str | None, end: str | None) -> float | None:
    """Seconds from ``start`` to ``end`` (None: either is missing or unreadable)."""
    if not start or not end:
        return None
    try:
        return round(max(0.0, (clock.parse(end) - clock.parse(start)).total_seconds()), 3)
    except ValueError:
        return None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
