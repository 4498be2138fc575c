"""Cost estimates: a compute config's price per hour, and a finished run's duration × that rate.

Prices are the catalog's on-demand figures (one region, one date; see catalog.PRICES_AS_OF): no spot
discounts, savings plans, storage, egress or Anyscale's own fees. Everything printed says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import catalog
from .errors import RtjobError

if TYPE_CHECKING:
    from .backends.base import RunInfo
    from .resolve import ResolvedJob
    from .spec import ComputeConfig, WorkerGroup

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
    """The estimated hourly cost of the cluster a resolved job asks for (None without a compute config)."""
    if job.compute_config is None:
        return None
    return compute_config_cost(pinned_compute_config(job.compute_config, job.worker_group, job.nodes))


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


def _ray_rate(backend: Any, info: RunInfo) -> HourlyCost | None:
    """For a run on a Ray cluster: the rate of its job's compute config at the node count it ran with
    (both recorded in the run's metadata). Best effort: the compute config is read as it is today."""
    api = getattr(backend, "api", None)
    if getattr(backend, "name", "") != "ray" or api is None:
        return None
    from .project import find_job_file, find_root
    from .resolve import _pick_group, load_compute_config
    from .spec import validate_job
    from .yamlsrc import load_yaml

    try:
        meta = (api.job(info.id) or {}).get("metadata") or {}
        job_file, nodes = meta.get("rtjob.job_file"), int(meta.get("rtjob.nodes") or 0)
        if not job_file or nodes < 1:
            return None
        root = find_root()
        path, shown = find_job_file(job_file, root)
        spec = validate_job(load_yaml(path, shown))
        if not spec.compute_config:
            return None
        cc, cc_shown = load_compute_config(spec.compute_config, root)
        group = _pick_group(cc, spec.worker_group, cc_shown)
        rate = compute_config_cost(pinned_compute_config(cc, group, nodes))
    except (RtjobError, OSError, ValueError):
        return None
    if rate is not None:
        rate.source = f"shape from {cc_shown} today, {nodes} node(s)"
    return rate


def finished_run_cost(backend: Any, info: RunInfo) -> dict[str, Any] | None:
    """The estimated cost of a finished run on ``backend`` (None if unknown, still running, or local)."""
    if not info.status.terminal or getattr(backend, "name", "") == "local":
        return None
    hourly = getattr(backend, "hourly_cost", None)
    rate = hourly(info.id) if callable(hourly) else _ray_rate(backend, info)
    return run_cost(info, rate) if rate is not None else None
