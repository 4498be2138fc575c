"""The largest shape an autoscaling Ray cluster can grow to, read where a queue's keeper runs (the head node).

Ray's monitor (the autoscaler) reads the cluster's autoscaling config from the file its command line names
(``--autoscaling-config=``; `ray up` writes ``~/ray_bootstrap_config.yaml`` on the head, each node type's resources
filled in from its instance type). Nothing in Ray reports that config to a client, so the keeper reads the same file,
from the monitor of its own cluster (matched by the GCS port: one machine may run several clusters).

The shape is the head node as it runs plus every worker node type at its ``max_workers``, each type held to the
global ``max_workers`` (the most worker nodes the cluster has at once, of all types together). It is an upper bound:
every cluster the autoscaler can reach is part of it, so a run that does not fit it can truly never fit; with one
worker type (the common config) it is exact, with several a run that fits it may still need more nodes than the
global cap allows at once. None where it cannot tell: no monitor of this cluster on this node (KubeRay runs its
autoscaler in a container of its own), a config it cannot read, a node type without resources or max_workers.

Imports at module level: the stdlib (the keeper runs it on the cluster); yaml (Ray's dependency) inside."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

Node = dict[str, float]
MONITOR = "autoscaler/_private/monitor.py"  # Ray's monitor, started by `ray start --head --autoscaling-config=`


def monitor_config(gcs_port: int, proc: str = "/proc") -> Path | None:
    """The autoscaling config file of the monitor that serves the GCS on ``gcs_port`` on this node, if one runs."""
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        try:
            args = Path(proc, pid, "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone, or not ours
        if not any(a.endswith(MONITOR) for a in args):
            continue
        if not any(re.fullmatch(rf"--gcs[-_]address=[^:\s]+:{gcs_port}", a) for a in args):
            continue
        for arg in args:
            if arg.startswith("--autoscaling-config="):
                return Path(os.path.expanduser(arg.split("=", 1)[1]))
    return None


def largest(config: dict[str, Any], head: Node) -> list[Node] | None:
    """The nodes of the cluster at its largest: ``head`` (the head node's resources as it runs), then each
    worker node type's resources ``max_workers`` times (at most the global ``max_workers``). None if a worker type
    lacks either."""
    types = config.get("available_node_types")
    if not isinstance(types, dict) or not types:
        return None
    nodes, cap = [dict(head)], config.get("max_workers")
    for name, kind in types.items():
        if name == config.get("head_node_type") or not isinstance(kind, dict):
            continue
        resources, count = kind.get("resources"), kind.get("max_workers", cap)
        if not isinstance(resources, dict) or not resources or not isinstance(count, int) or count < 0:
            return None
        node = {str(k): float(v) for k, v in resources.items() if isinstance(v, int | float)}
        nodes += [dict(node) for _ in range(min(count, cap) if isinstance(cap, int) and cap >= 0 else count)]
    return nodes


def read_largest(gcs_port: int, head: Node, proc: str = "/proc") -> tuple[list[Node], str] | None:
    """The cluster's largest shape and the file it was read from, or None (see the module's docstring)."""
    path = monitor_config(gcs_port, proc)
    if path is None:
        return None
    try:
        import yaml  # JSON is YAML too: `ray start --autoscaling-config` takes either
    except ImportError:
        return None
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    found = largest(config, head) if isinstance(config, dict) else None
    return None if found is None else (found, str(path))
