"""Cost rates: a compute config's estimated price per hour, and a finished run's cost (its duration × the rate
recorded with it: the client's `status` and the run's companion on the cluster both apply ``run_cost``).

Prices are the catalog's on-demand figures (one region, one date; see catalog.PRICES_AS_OF): no spot
discounts, savings plans, storage, egress or Anyscale's own fees. Everything printed says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import catalog

if TYPE_CHECKING:
    from ..core.model import RunInfo
    from .resolve import ResolvedJob
    from .schema import ComputeConfig, WorkerGroup

BASIS = f"AWS on-demand prices, {catalog.PRICES_REGION}, as of {catalog.PRICES_AS_OF}; an estimate"


@dataclass
class HourlyCost:
    """USD per hour of a cluster shape: ``low`` with every group at min_nodes, ``high`` at max_nodes."""

    low: float
    high: float
    parts: list[str] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)  # instance types the catalog has no price for
    spot: bool = False  # some group may run on spot instances (usually cheaper than shown)
    source: str = ""  # where the shape came from, when it is not the request itself

    @property
    def fixed(self) -> bool:
        return abs(self.high - self.low) < 0.005

    def rate_text(self) -> str:
        rate = f"${self.low:,.2f}/h" if self.fixed else f"${self.low:,.2f}–${self.high:,.2f}/h"
        return f"≥ {rate}" if self.unpriced else rate

    def text(self) -> str:
        extras = []
        if self.unpriced:
            extras.append(f"no price for {', '.join(sorted(set(self.unpriced)))}")
        if self.spot:
            extras.append("spot groups priced on-demand")
        if self.source:
            extras.append(self.source)
        extra = f"; {'; '.join(extras)}" if extras else ""
        return f"est. {self.rate_text()} = {' + '.join(self.parts) or '-'} ({BASIS}{extra})"

    def to_json(self) -> dict[str, Any]:
        return {
            "usd_per_hour": round(self.low, 4) if self.fixed else None,
            "usd_per_hour_min": round(self.low, 4),
            "usd_per_hour_max": round(self.high, 4),
            "breakdown": self.parts,
            "unpriced_instance_types": sorted(set(self.unpriced)),
            "spot": self.spot,
            "basis": BASIS,
            **({"source": self.source} if self.source else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HourlyCost:
        """The inverse of ``to_json`` (a rate recorded with a run); ValueError/TypeError if it is not one."""
        return cls(
            low=float(data["usd_per_hour_min"]),
            high=float(data["usd_per_hour_max"]),
            parts=[str(p) for p in data.get("breakdown") or []],
            unpriced=[str(u) for u in data.get("unpriced_instance_types") or []],
            spot=bool(data.get("spot")),
            source=str(data.get("source") or ""),
        )


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


def _price(instance_type: str) -> float | None:
    itype = catalog.lookup(instance_type)
    return itype.price_usd_per_hour if itype else None


def compute_config_cost(cc: Mapping[str, Any] | None) -> HourlyCost | None:
    """The hourly cost of an Anyscale-shaped compute config (a dict: head_node, worker_nodes)."""
    if not isinstance(cc, Mapping):
        return None
    cost = HourlyCost(0.0, 0.0)
    head = cc.get("head_node") or {}
    if isinstance(head, Mapping) and head.get("instance_type"):
        name = str(head["instance_type"])
        price = _price(name)
        if price is None:
            cost.unpriced.append(name)
        else:
            cost.low += price
            cost.high += price
            cost.parts.append(f"head {name} ${price:g}")
    for group in cc.get("worker_nodes") or []:
        if not isinstance(group, Mapping) or not group.get("instance_type"):
            continue
        name = str(group["instance_type"])
        low, high = int(group.get("min_nodes") or 0), int(group.get("max_nodes") or 0)
        high = max(high, low)
        if str(group.get("market_type") or "ON_DEMAND").upper() != "ON_DEMAND":
            cost.spot = True
        price = _price(name)
        if price is None:
            cost.unpriced.append(name)
            continue
        cost.low += low * price
        cost.high += high * price
        count = f"{low}" if low == high else f"{low}–{high}"
        label = group.get("name")
        cost.parts.append(f"{count} × {name} ${price:g}" + (f" ({label})" if label and label != name else ""))
    return cost


def pinned_compute_config(cc: ComputeConfig, group: WorkerGroup | None, nodes: int) -> dict[str, Any]:
    """The compute config as Anyscale's schema wants it, with ``group`` pinned to ``nodes`` nodes
    (min_nodes = max_nodes = nodes): the cluster a run of ``nodes`` nodes gets."""
    data = cc.model_dump(exclude_none=True)
    for index, candidate in enumerate(cc.worker_nodes):
        if candidate is group:
            data["worker_nodes"][index]["min_nodes"] = nodes
            data["worker_nodes"][index]["max_nodes"] = nodes
    return data


def job_cost(job: ResolvedJob) -> HourlyCost | None:
    """The estimated hourly cost of the cluster a resolved job asks for (None without a compute config, and on
    the embedded cluster, which is this machine)."""
    if job.compute_config is None or job.embedded:
        return None
    return compute_config_cost(pinned_compute_config(job.compute_config, job.worker_group, job.nodes))
