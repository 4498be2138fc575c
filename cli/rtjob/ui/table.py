"""The runs table's rows and columns: an index row (a record's is core/index_entry.entry_of) as a row (duration,
tags, args, final metrics), and which args and metrics are shown as columns."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..core import clock
from ..core.errors import BadInput

PREFERRED_METRICS = ("val_loss", "val_accuracy", "train_loss", "loss", "accuracy")
DEFAULT_ARG_COLUMNS = 3


def _seconds(start: Any, end: Any) -> float | None:
    try:
        began = dt.datetime.fromisoformat(str(start))
        ended = dt.datetime.fromisoformat(str(end)) if end else clock.now()
    except ValueError:
        return None
    if began.tzinfo is None or ended.tzinfo is None:
        return None
    return max(0.0, (ended - began).total_seconds())


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A listed row with what the table shows filled in: duration (the entry's, else from its times: a run not
    ended counts up to now), tags, args and final metrics as dicts (absent from older entries: empty)."""
    from ..storage.results import number

    out = dict(row)
    started = row.get("start_time") or row.get("submitted_at")
    duration = number(row.get("duration_s"))
    if duration is None and started and (row.get("end_time") or row.get("status") in ("RUNNING", "PENDING")):
        duration = _seconds(started, row.get("end_time"))
    out["duration_s"] = duration
    for name in ("tags", "args", "final_metrics"):
        out[name] = row.get(name) if isinstance(row.get(name), dict) else {}
    out["final_metrics"] = {k: v for k, v in out["final_metrics"].items() if number(v) is not None}
    return out


def table_columns(rows: list[dict[str, Any]], chosen: list[str] | None) -> tuple[list[str], list[str], list[str]]:
    """(every column one may choose: "args.X" and "metric.Y", the chosen ones, in that order). Chosen: as asked,
    else the first few args and the preferred final metrics the shown rows hold."""
    args: list[str] = []
    metrics: list[str] = []
    for row in rows:
        args.extend(f"args.{k}" for k in row["args"] if f"args.{k}" not in args)
        metrics.extend(f"metric.{k}" for k in row["final_metrics"] if f"metric.{k}" not in metrics)
    choosable = args + metrics
    if chosen is None:
        preferred = [f"metric.{m}" for m in PREFERRED_METRICS if f"metric.{m}" in metrics][:2]
        return choosable, args[:DEFAULT_ARG_COLUMNS], preferred
    return choosable, [c for c in chosen if c.startswith("args.")], [c for c in chosen if c.startswith("metric.")]


def parse_columns(value: str | None) -> list[str] | None:
    """``cols``: comma-separated "args.X" / "metric.Y" (None: the default choice)."""
    if value is None:
        return None
    cols = [c.strip() for c in value.split(",") if c.strip()]
    for col in cols:
        if not col.startswith(("args.", "metric.")) or len(col) > 200:
            raise BadInput(f"cols {col[:60]!r}: expected args.NAME or metric.NAME, comma-separated")
    return cols
