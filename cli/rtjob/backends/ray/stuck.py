"""Is a run waiting for resources its cluster does not have? Read from Ray's State API, per job.

A script that asks Ray for more than the cluster has (2 workers × {GPU: 1} on a CPU cluster) does not fail:
Ray Train V2 retries its worker group for ever and the job stays RUNNING. Ray keeps every demand it cannot
place pending: this job's pending placement groups, actors and tasks (filtered by the driver's job id) are
compared with the nodes' total resources (what they have, not what is free now, so a busy cluster is never
mistaken for a small one). What no node set can ever hold is what the run waits for in vain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import precheck

# Resource names Ray derives for placement-group bundles (CPU_group_0_<pg>, bundle_group_<pg>) and for nodes
# (node:<ip>): the base resource (CPU) is what is compared.
_DERIVED = ("_group_", "node:", "bundle")
LIMIT = "100"


def _plain(resources: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (resources or {}).items():
        if any(mark in key for mark in _DERIVED) or key in precheck.IGNORED:
            continue
        try:
            amount = float(value)
        except (TypeError, ValueError):
            continue
        if amount > 0:
            out[key] = amount
    return out


def _describe(bundles: list[dict[str, float]]) -> str:
    """'{GPU: 1, CPU: 1} × 2' (identical bundles counted) or the bundles one after another."""
    shown = [", ".join(f"{k}: {v:g}" for k, v in b.items()) for b in bundles]
    if len(set(shown)) == 1:
        return f"{{{shown[0]}}}" + (f" × {len(shown)}" if len(shown) > 1 else "")
    return " + ".join(f"{{{s}}}" for s in shown)


def _missing(bundles: list[dict[str, float]], nodes: list[dict[str, float]]) -> str:
    """What is short, e.g. 'GPU: needs 2, cluster has 0'."""
    parts = []
    for key in sorted({k for b in bundles for k in b}):
        need = sum(b.get(key, 0.0) for b in bundles)
        have = sum(n.get(key, 0.0) for n in nodes)
        if have + 1e-9 < need:
            parts.append(f"{key}: needs {need:g}, cluster has {have:g}")
    return "; ".join(parts) or "no node is large enough for one of them"


def node_totals(nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, float]]:
    return [_plain(n.get("resources_total")) for n in nodes]


def demands(placement_groups: list[dict[str, Any]], actors: list[dict[str, Any]],
            tasks: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, float]]]]:
    """The job's pending demands: (what, bundles) for each placement group, actor and task."""
    out: list[tuple[str, list[dict[str, float]]]] = []
    for group in placement_groups:
        bundles = [_plain(b.get("unit_resources") or b.get("unitResources")) for b in group.get("bundles") or []]
        bundles = [b for b in bundles if b]
        if bundles:
            out.append(("placement group", bundles))
    for kind, items in (("actor", actors), ("task", tasks)):
        for item in items:
            need = _plain(item.get("required_resources"))
            if need:
                out.append((f"{kind} {item.get('class_name') or item.get('name') or ''}".strip(), [need]))
    return out


def never_fitting(pending: list[tuple[str, list[dict[str, float]]]], nodes: list[dict[str, float]]) -> str | None:
    """One line for the first demand the nodes can never hold, or None."""
    for what, bundles in pending:
        if not precheck.bundles_fit(bundles, nodes):
            return f"{_describe(bundles)} ({what}) that this cluster does not have ({_missing(bundles, nodes)})"
    return None


def _listing(api: Any, kind: str, job_field: str, job_id: str, state: str) -> list[dict[str, Any]]:
    path = f"/api/v0/{kind}"
    params = [("detail", "1"), ("limit", LIMIT), ("filter_keys", job_field), ("filter_predicates", "="),
              ("filter_values", job_id), ("filter_keys", "state"), ("filter_predicates", "="),
              ("filter_values", state)]
    data = api.get_json(path, params=params)
    try:
        found = data["data"]["result"]["result"]
    except (KeyError, TypeError):
        return []
    return [item for item in found if isinstance(item, dict)]


def waits_for(api: Any, job_id: str) -> str | None:
    """What the job with driver ``job_id`` waits for that the cluster can never give it, or None."""
    pending = demands(
        _listing(api, "placement_groups", "creator_job_id", job_id, "PENDING"),
        _listing(api, "actors", "job_id", job_id, "PENDING_CREATION"),
        _listing(api, "tasks", "job_id", job_id, "PENDING_NODE_ASSIGNMENT"),
    )
    if not pending:
        return None
    return never_fitting(pending, node_totals(api.nodes()))
