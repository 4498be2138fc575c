"""A finished run's estimated cost as the client asks for it: the rate its backend recorded with it, × its duration
(jobspec/pricing.run_cost, the rule the run's companion applies too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..jobspec.pricing import run_cost

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..core.model import RunInfo


def finished_run_cost(backend: Backend, info: RunInfo) -> dict[str, Any] | None:
    """The estimated cost of a finished run on ``backend`` (None if unknown, still running, or free)."""
    if not info.status.terminal:
        return None
    rate = backend.hourly_cost(info)
    return run_cost(info, rate) if rate is not None else None
