"""The embedded local Ray cluster: N Ray nodes (separate raylets) on this machine, token auth on.

rtjob records what it started (a private temp dir, ports, a token file) and stops exactly those
processes: `ray stop` would end every Ray process on the machine, other people's clusters included.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...core.errors import BadInput, Unreachable
from ...spec.project import rtjob_home

OBJECT_STORE_BYTES = 512 * 1024**2  # per node; training here streams from disk, not the object store


@dataclass
class LocalCluster:
    address: str  # dashboard (Jobs API) URL
    gcs_address: str
    temp_dir: str
    token_path: str
    cpus_per_node: int
    started_at: float

    @property
    def token(self) -> str:
        return Path(self.token_path).read_text().strip()


def state_dir() -> Path:
    return rtjob_home() / "local"


def _state_file() -> Path:
    return state_dir() / "cluster.json"


def load_state() -> LocalCluster | None:
    try:
        return LocalCluster(**json.loads(_state_file().read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: the sockets stay bound until all are chosen, so none repeats."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _ray_executable() -> list[str]:
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    if found:
        return [found]
    raise BadInput("the embedded cluster needs Ray: pip install 'rtjob[ray]' (or 'rtjob[train]' to train locally)")


def _env(token_path: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN"):
        env.pop(name, None)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token_path, RAY_USAGE_STATS_ENABLED="0")
    # Jobs run `python ...`: make that the Python rtjob runs in (its venv), as an activated venv would.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _node_ports() -> list[str]:
    """Free ports for one node's agents: Ray's fixed defaults (52365, ...) collide between the nodes of
    one machine and with any other Ray cluster on it."""
    listen, grpc, runtime_env, metrics = _free_ports(4)
    return [
        "--dashboard-agent-listen-port", str(listen),
        "--dashboard-agent-grpc-port", str(grpc),
        "--runtime-env-agent-port", str(runtime_env),
        "--metrics-export-port", str(metrics),
    ]


def _run_ray(args: list[str], token_path: str, what: str) -> None:
    proc = subprocess.run(
        [*_ray_executable(), *args], env=_env(token_path), capture_output=True, text=True, timeout=180
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise Unreachable(f"could not {what}: {' | '.join(tail)}")


def _nodes(cluster: LocalCluster, timeout: float = 5.0) -> list[dict[str, Any]]:
    import requests

    resp = requests.get(
        f"{cluster.address}/api/v0/nodes",
        params={"detail": "1", "limit": "1000"},
        headers={"Authorization": f"Bearer {cluster.token}"},
        timeout=timeout,
    )
    resp.raise_for_status()
    return [n for n in resp.json()["data"]["result"]["result"] if n.get("state") == "ALIVE"]


def alive_nodes(cluster: LocalCluster) -> list[dict[str, Any]] | None:
    """The cluster's alive nodes, or None if its dashboard does not answer."""
    import requests

    try:
        return _nodes(cluster)
    except (requests.RequestException, OSError, KeyError, ValueError):
        return None


def _wait_nodes(cluster: LocalCluster, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = alive_nodes(cluster)
        if nodes is not None and len(nodes) >= count:
            return
        time.sleep(0.5)
    raise Unreachable(f"the embedded cluster did not reach {count} node(s) within {timeout:.0f}s")


def up(nodes: int = 1, cpus_per_node: int = 1, log: Any = None) -> LocalCluster:
    """Start the embedded cluster, or reuse it; add nodes until it has at least ``nodes``."""
    say = log or (lambda msg: None)
    cluster = load_state()
    if cluster is not None and alive_nodes(cluster) is None:
        say("the embedded cluster recorded in state is gone; starting a new one")
        _stop_processes(cluster)
        cluster = None
    if cluster is None:
        state_dir().mkdir(parents=True, exist_ok=True)
        token_path = state_dir() / "auth_token"
        token_path.write_text(secrets.token_hex(32))
        token_path.chmod(0o600)
        # A short private root: Ray's unix socket paths must stay under ~100 characters.
        temp_dir = tempfile.mkdtemp(prefix="rtjob-ray-", dir="/tmp")
        gcs_port, dash_port, client_port = _free_ports(3)
        say(f"starting the embedded Ray cluster (dashboard http://127.0.0.1:{dash_port})")
        cluster = LocalCluster(
            address=f"http://127.0.0.1:{dash_port}",
            gcs_address=f"127.0.0.1:{gcs_port}",
            temp_dir=temp_dir,
            token_path=str(token_path),
            cpus_per_node=cpus_per_node,
            started_at=time.time(),
        )
        # Record before starting, so `down` can clean up even a half-started cluster.
        _state_file().write_text(json.dumps(asdict(cluster), indent=2))
        _run_ray(
            [
                "start", "--head", "--port", str(gcs_port), "--dashboard-host", "127.0.0.1",
                "--dashboard-port", str(dash_port), "--ray-client-server-port", str(client_port),
                "--num-cpus", str(cpus_per_node), "--num-gpus", "0", "--temp-dir", temp_dir,
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats", *_node_ports(),
            ],
            str(token_path),
            "start the embedded Ray cluster",
        )
        _wait_nodes(cluster, 1)
    current = alive_nodes(cluster) or []
    for index in range(len(current), nodes):
        say(f"adding node {index + 1}/{nodes} to the embedded cluster")
        # Each node its own temp dir (Ray >= 2.51 honours --temp-dir on a worker node), as on separate
        # machines: in the head's folder, a second node's runtime_env agent deleted and re-unpacked a
        # running job's working dir, and a second log monitor printed every worker line twice. Under
        # the cluster's own temp dir, so `down` finds and removes it with the rest.
        node_dir = os.path.join(cluster.temp_dir, f"n{index + 1}")
        os.makedirs(node_dir, exist_ok=True)
        _run_ray(
            [
                "start", "--address", cluster.gcs_address, "--num-cpus", str(cpus_per_node), "--num-gpus", "0",
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--temp-dir", node_dir,
                "--disable-usage-stats", *_node_ports(),
            ],
            cluster.token_path,
            f"add node {index + 1} to the embedded cluster",
        )
    if nodes > len(current):
        _wait_nodes(cluster, nodes)
    return cluster


def _our_processes(cluster: LocalCluster) -> list[Any]:
    import psutil

    found: dict[int, Any] = {}
    gcs_port = cluster.gcs_address.rsplit(":", 1)[-1]
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        # Ray's client server is daemonised and names only the GCS address, not the temp dir.
        client_server = "ray.util.client.server" in cmdline and f":{gcs_port} " in cmdline + " "
        if cluster.temp_dir in cmdline or client_server:
            found[proc.pid] = proc
    for proc in list(found.values()):
        try:
            for child in proc.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
    found.pop(os.getpid(), None)
    return list(found.values())


def _stop_processes(cluster: LocalCluster, grace: float = 10.0) -> int:
    import psutil

    procs = _our_processes(cluster)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    return len(procs)


def down() -> int:
    """Stop the embedded cluster's processes (only those). Returns how many processes were ended."""
    cluster = load_state()
    if cluster is None:
        return 0
    count = _stop_processes(cluster)
    _state_file().unlink(missing_ok=True)
    return count


def require() -> LocalCluster:
    cluster = load_state()
    if cluster is None or alive_nodes(cluster) is None:
        raise Unreachable("the embedded Ray cluster is not running (rtjob submit or rtjob local up starts it)")
    return cluster


def describe(cluster: LocalCluster) -> dict[str, Any]:
    """The cluster as `rtjob local status` shows it: address, alive nodes, CPUs, its temp dir."""
    nodes = alive_nodes(cluster) or []
    cpus = sum(float((n.get("resources_total") or {}).get("CPU", 0)) for n in nodes)
    return {"address": cluster.address, "nodes": len(nodes), "cpus": cpus, "temp_dir": cluster.temp_dir}
