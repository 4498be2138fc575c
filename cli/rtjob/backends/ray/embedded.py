"""The embedded cluster as the 'local' backend's ``LocalCluster`` capability (`rtjob local up|down|status`)."""

from __future__ import annotations

from typing import Any

from ..base import Log
from ..capabilities import LocalCluster
from . import cluster


class EmbeddedCluster(LocalCluster):
    def up(self, nodes: int, cpus_per_node: int, log: Log, gpus_per_node: int = 0) -> dict[str, Any]:
        return cluster.describe(cluster.up(nodes, cpus_per_node, log=log, gpus_per_node=gpus_per_node))

    def running(self) -> bool:
        return self.dashboard() is not None

    def dashboard(self) -> str | None:
        try:
            state = cluster.load_state()
        except cluster.DamagedState:
            return None  # down reports the damage and still stops what it finds
        return state.address if state is not None else None

    def down(self, log: Log) -> int:
        return cluster.down(log=log)

    def describe(self) -> dict[str, Any] | None:
        return cluster.status()

    def env(self) -> dict[str, str]:
        running = cluster.require()
        # The dashboard for `ray job ...`, the GCS for `ray status` and drivers; token auth as the cluster runs it.
        return {"RAY_API_SERVER_ADDRESS": running.address, "RAY_ADDRESS": running.gcs_address,
                "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": running.token_path}
