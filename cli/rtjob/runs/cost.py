"""A finished run's estimated cost: its duration × the rate of its cluster (recorded with the run)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from ..jobspec.pricing import BASIS, HourlyCost

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.model import RunInfo


def _hours(info: RunInfo) -> float | None:
    if not info.start_time or not info.end_time:
        return None
    start = dt.datetime.fromisoformat(info.start_time)
    end = dt.datetime.fromisoformat(info.end_time)
    return max(0.0, (end - start).total_seconds() / 3600)


def run_cost(info: RunInfo, rate: HourlyCost) -> dict[str, Any] | None:
    """A finished run's estimated cost: its duration × the rate of its cluster (None while it runs)."""
    hours = _hours(info)
    if hours is None or not info.status.terminal:
        return None
    low, high = hours * rate.low, hours * rate.high
    amount = f"${low:,.2f}" if rate.fixed else f"${low:,.2f}–${high:,.2f}"
    minutes = round(hours * 60)
    source = f"; {rate.source}" if rate.source else ""
    text = (f"est. {'≥ ' if rate.unpriced else ''}{amount} ({minutes // 60}h{minutes % 60:02d}m × "
            f"{rate.rate_text()}; {BASIS}{source})")
    return {
        "estimated_usd": round(low, 2) if rate.fixed else None,
        "estimated_usd_min": round(low, 2),
        "estimated_usd_max": round(high, 2),
        "hours": round(hours, 4),
        "rate": rate.to_json(),
        "text": text,
    }


def finished_run_cost(backend: Backend, info: RunInfo) -> dict[str, Any] | None:
    """The estimated cost of a finished run on ``backend`` (None if unknown, still running, or free)."""
    if not info.status.terminal:
        return None
    rate = backend.hourly_cost(info)
    return run_cost(info, rate) if rate is not None else None
