"""A real Ray cluster with an autoscaler on this machine: Ray's fake multi-node provider (the one Ray's own autoscaler
tests use, ray/autoscaler/_private/fake_multi_node) starts a worker node here, as a node's processes, when the
autoscaler decides to launch one, and stops it when the autoscaler removes it.

Not ray.cluster_utils.AutoscalingCluster: that runs `ray stop --force` at its start and end, which stops every Ray
process of this user (the other tests' clusters too). This one has its own ports and temp dir, and is stopped by
pid: every process that carries its marker variable (each one the head started inherits it, the launched nodes'
too)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from .processes import children_of, end_pids, free_ports, marked_pids
from .scrub import scrubbed_environ

MARK = "RTJOB_TEST_AUTOSCALING_CLUSTER"


@dataclass(frozen=True)
class AutoscalingCluster:
    address: str  # the dashboard (Jobs API)
    gcs_address: str
    temp_dir: str


def _config(gcs_port: int, head_cpus: int, worker: dict[str, float], max_workers: int) -> dict[str, object]:
    """An autoscaling config for the fake provider: the head, and one worker node type of ``worker``'s resources,
    0 of them at first, up to ``max_workers``; an idle worker node is removed after 6 s."""
    types = {
        "ray.head.default": {"resources": {"CPU": head_cpus}, "node_config": {}, "max_workers": 0},
        "ray.worker.grown": {"resources": {**worker, "object_store_memory": 100_000_000}, "node_config": {},
                             "min_workers": 0, "max_workers": max_workers},
    }
    empty: dict[str, list[object]] = {k: [] for k in (
        "initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
        "head_start_ray_commands", "worker_start_ray_commands", "cluster_synced_files", "rsync_exclude",
        "rsync_filter")}
    return {"cluster_name": f"rtjob-test-{gcs_port}", "max_workers": max_workers, "upscaling_speed": 1.0,
            "idle_timeout_minutes": 0.1, "head_node_type": "ray.head.default", "available_node_types": types,
            "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                         "disable_launch_config_check": True, "gcs_address": f"127.0.0.1:{gcs_port}"},
            "auth": {}, "docker": {}, "file_mounts": {}, "file_mounts_sync_continuously": False, **empty}


def _stop(token: str) -> None:
    """Every marked process and its children (a renamed agent may have written over its mark) ended by pid; again
    while any is left (a raylet that is going away may still start an agent)."""
    for _ in range(5):
        pids = children_of(marked_pids(MARK, token))
        if not pids:
            return
        end_pids(pids, term_grace=15.0, kill_grace=5.0)


@contextmanager
def autoscaling_cluster(work: Path, head_cpus: int, worker: dict[str, float],
                        max_workers: int = 1) -> Iterator[AutoscalingCluster]:
    """A head of ``head_cpus`` CPUs whose autoscaler can add up to ``max_workers`` nodes of ``worker``'s
    resources; stopped, every process of it, at the end."""
    gcs, dash, client, listen, grpc, runtime_env, metrics = free_ports(7)
    work.mkdir(parents=True, exist_ok=True)
    temp_dir = Path(tempfile.mkdtemp(prefix="rtjob-as-", dir="/tmp"))  # short: Ray's socket paths live in it
    config = work / "autoscaling.json"
    config.write_text(json.dumps(_config(gcs, head_cpus, worker, max_workers)))
    token = uuid.uuid4().hex
    env = {**scrubbed_environ(), MARK: token, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
           "RAY_USAGE_STATS_ENABLED": "0"}
    bin_dir = str(Path(sys.executable).parent)  # a job's `python` is this venv's, as on a cluster's image
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    ray = str(Path(bin_dir) / "ray")
    cluster = AutoscalingCluster(f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", str(temp_dir))
    try:
        started = subprocess.run([ray, "start", "--head", "--port", str(gcs), "--dashboard-host", "127.0.0.1",
                        "--dashboard-port", str(dash), "--ray-client-server-port", str(client),
                        "--dashboard-agent-listen-port", str(listen), "--dashboard-agent-grpc-port", str(grpc),
                        "--runtime-env-agent-port", str(runtime_env), "--metrics-export-port", str(metrics),
                        "--num-cpus", str(head_cpus), "--temp-dir", str(temp_dir), "--disable-usage-stats",
                        f"--autoscaling-config={config}"],
                       env=env, capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise RuntimeError(f"`ray start` of the autoscaling head exited {started.returncode}: "
                               f"{started.stderr.strip()[-2000:]}")
        deadline = time.monotonic() + 120
        while not _reports(cluster.address):  # its dashboard answers, and Ray's monitor has typed the head node
            if time.monotonic() > deadline:
                raise RuntimeError(f"the autoscaling cluster {cluster.address} never reported its autoscaler")
            time.sleep(0.5)
        yield cluster
    finally:
        _stop(token)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _reports(address: str) -> bool:
    try:
        data = requests.get(f"{address}/api/cluster_status", timeout=5).json()["data"]
        return bool(data["clusterStatus"]["autoscalerReport"]["nodeTypeMapping"])
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return False


def alive_nodes(cluster: AutoscalingCluster) -> int:
    """How many nodes the cluster lists alive (Ray's state API)."""
    resp = requests.get(f"{cluster.address}/api/v0/nodes", params={"detail": "1", "limit": "100"}, timeout=10)
    resp.raise_for_status()
    return sum(1 for n in resp.json()["data"]["result"]["result"] if n.get("state") == "ALIVE")
