"""Will the job ever fit? Compare what it needs with what the cluster's nodes offer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

IGNORED = ("memory", "object_store_memory")


def bundles_fit(bundles: Sequence[Mapping[str, float]], nodes: list[dict[str, float]]) -> bool:
    """First-fit, largest bundle first, onto the nodes' total resources: PACK and SPREAD placement can do at
    least this well (STRICT_* may not, and are then not reported as stuck: never a false alarm). A job's
    identical workers are ``[need] * workers``."""
    free = [dict(n) for n in nodes]
    for bundle in sorted(bundles, key=lambda b: -sum(b.values())):
        for node in free:
            if all(node.get(k, 0.0) + 1e-9 >= v for k, v in bundle.items()):
                for k, v in bundle.items():
                    node[k] = node.get(k, 0.0) - v
                break
        else:
            return False
    return True


def shortfall(need_per_worker: Mapping[str, float], workers: int, nodes: list[dict[str, float]]) -> str:
    """A human description of what is missing, e.g. 'GPU: needs 3, cluster has 0'."""
    parts = []
    for key, per in need_per_worker.items():
        need = per * workers
        have = sum(n.get(key, 0.0) for n in nodes)
        if have + 1e-9 < need:
            parts.append(f"{key}: needs {need:g}, cluster has {have:g}")
    if not parts:
        biggest = max((n.get(k, 0.0) for n in nodes for k in need_per_worker), default=0.0)
        parts.append(
            f"no node can hold one worker's {dict(need_per_worker)} (largest node offers {biggest:g})"
            if not bundles_fit([need_per_worker], nodes)
            else "the workers do not pack onto the nodes (resources are split across too many nodes)"
        )
    return "; ".join(parts)


def describe(need_per_worker: Mapping[str, float], workers: int) -> str:
    res = ", ".join(f"{k}={v:g}" for k, v in need_per_worker.items() if k not in IGNORED)
    return f"{workers} worker(s) × {{{res}}}"
