"""How the pages show values (the templates' filters: a time as "5 min ago", a duration, a number) and a run's
metrics as chart data (grouped: losses, accuracies, throughput; compared runs overlaid on shared epochs)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..core import clock
from ..core.end_words import end_line
from . import run_page

CHART_GROUPS = (("loss", ("loss",)), ("accuracy", ("acc",)), ("samples/s", ("samples_per_s", "throughput")))
# Bookkeeping a training loop reports beside its metrics (sizes, times, memory): not charted.
NOT_CHARTED = ("_samples", "_time_s", "_mem_mb", "_bytes")


def ago(when: Any) -> str:
    """An ISO time as "5 min ago" (the page shows the absolute one on hover)."""
    try:
        then = dt.datetime.fromisoformat(str(when))
    except ValueError:
        return str(when or "")
    if then.tzinfo is None:
        return str(when)
    seconds = (clock.now() - then).total_seconds()
    if seconds < 0:
        return "just now"
    for size, unit in ((86400 * 365, "y"), (86400 * 30, "mo"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def end_words(message: Any, status: Any = None) -> str:
    """A run's end message as its one line in rtjob's words (core/end_words), '' when it says nothing a status
    does not (Ray's "Job has not started yet." under RUNNING)."""
    return end_line(str(message) if message else None, str(status) if status else None) or ""


def duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return ""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def short(value: Any, size: int = 60) -> str:
    text = str(value)
    return text if len(text) <= size else text[:size - 1] + "…"


def num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _grouped(keys: list[str]) -> list[tuple[str, list[str]]]:
    groups: list[tuple[str, list[str]]] = []
    taken: set[str] = set()
    for title, words in CHART_GROUPS:
        chosen = [k for k in keys if k not in taken and any(w in k for w in words)]
        if chosen:
            groups.append((title, chosen))
            taken.update(chosen)
    groups += [(k, [k]) for k in keys if k not in taken]
    return groups


def charts(rows: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A run's charts: {title, x (epochs), series [{label, values}]}: the page carries the points as data."""
    if not rows:
        return []
    data = run_page.series(rows)
    xs = data.pop("epoch")
    keys = [k for k in data if not k.endswith(NOT_CHARTED)]
    return [{"title": title, "x": xs, "series": [{"label": k, "values": data[k]} for k in chosen]}
            for title, chosen in _grouped(keys)]


def overlaid(runs: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The compared runs' curves on shared epochs: one chart per metric, a series per run, labelled by the run's
    number on the page (the page's key says which run: legends stay short)."""
    per_run = [(str(n), run_page.series(rows)) for n, (_, rows) in enumerate(runs, 1) if rows]
    if not per_run:
        return []
    xs = sorted({x for _, data in per_run for x in data["epoch"] if x is not None})
    keys: list[str] = []
    for _, data in per_run:
        keys.extend(k for k in data if k not in keys and k != "epoch" and not k.endswith(NOT_CHARTED))
    charts = []
    for key in keys:
        series = []
        for run_id, data in per_run:
            if key in data:
                at = dict(zip(data["epoch"], data[key], strict=True))
                series.append({"label": f"run {run_id}", "values": [at.get(x) for x in xs]})
        charts.append({"title": key, "x": xs, "series": series})
    return charts


def timeline_bar(timeline: Any) -> list[dict[str, Any]]:
    """A timeline (stage -> ISO time) as a horizontal bar: each stage a segment from its time to the next stage's
    (the last one a mark at the bar's end), ``left`` and ``width`` in percent of the whole, ``after_s`` from the
    first stage. Empty when it has no time it can read."""
    from ..core.clock import parse

    stamps = []
    for stage, when in (timeline or {}).items():
        try:
            stamps.append((parse(str(when)), str(stage)))
        except ValueError:
            continue
    stamps.sort()
    if not stamps:
        return []
    first, total = stamps[0][0], max((stamps[-1][0] - stamps[0][0]).total_seconds(), 1e-9)
    out = []
    for i, (when, stage) in enumerate(stamps):
        after = (when - first).total_seconds()
        until = (stamps[i + 1][0] - first).total_seconds() if i + 1 < len(stamps) else after
        out.append({"stage": stage, "after_s": round(after, 1), "left": round(100 * after / total, 2),
                    "width": round(100 * (until - after) / total, 2)})
    return out


def earlier_attempts(record: Any) -> list[dict[str, Any]]:
    """The attempts before a run's last one (core/lifecycle.earlier): number, id, status, end, duration."""
    from ..core.lifecycle import earlier

    return [a.to_json() for a in earlier(record)]
