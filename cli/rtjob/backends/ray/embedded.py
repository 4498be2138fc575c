"""The embedded cluster as the 'local' backend's ``LocalCluster`` capability (`rtjob local up|down|status`)."""

from __future__ import annotations

from typing import Any

from ..base import Log
from ..capabilities import LocalCluster
from . import cluster


class EmbeddedCluster(LocalCluster):
    def up(self, nodes: int, cpus_per_node: int, log: Log) -> dict[str, Any]:
        return cluster.describe(cluster.up(nodes, cpus_per_node, log=log))

    def running(self) -> bool:
        try:
            return cluster.load_state() is not None
        except cluster.DamagedState:
            return False  # down reports the damage and still stops what it finds

    def down(self, log: Log) -> int:
        return cluster.down(log=log)

    def describe(self) -> dict[str, Any]:
        return cluster.describe(cluster.require())
