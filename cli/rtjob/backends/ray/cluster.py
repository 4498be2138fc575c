"""The embedded local Ray cluster: N Ray nodes (separate raylets) on this machine, token auth on.

rtjob records what it started (a private temp dir, ports, a token file) and stops exactly those
processes: `ray stop` would end every Ray process on the machine, other people's clusters included.

Safety rules (the hardening issue, part 4):
- one file lock (``<RTJOB_HOME>/local/cluster.lock``) around start, growth and stop, so a second rtjob waits
  for a first one that is still in ``ray start`` and then reuses its cluster; a cluster that already runs as
  asked is reused without the lock (cluster_lock.py says why that stays safe against `local down`);
- a cluster whose dashboard does not answer but whose GCS still runs is waited for, never killed;
- the token and the state file are written 0600 from the start (a private temp file, then a rename);
- ``cluster.json`` is validated before any process is touched, and only processes whose command line
  carries the recorded temp dir as a path component (or Ray's client server on the recorded GCS port)
  are ever stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ...core.errors import BadInput, Unreachable
from ...core.files import write_atomically
from .cluster_lock import locked as _locked
from .cluster_lock import state_dir, stopping
from .cluster_processes import gcs_runs_in, process_name
from .cluster_processes import processes_in as _processes_in
from .cluster_processes import stop as _stop
from .tuning import RAY_SETTINGS

OBJECT_STORE_BYTES = 512 * 1024**2  # per node; training here streams from disk, not the object store
# A short private root: Ray's unix socket paths must stay under ~100 characters.
TEMP_ROOT = "/tmp"
TEMP_PREFIX = "rtjob-ray-"
# Written into each temp dir rtjob creates: which RTJOB_HOME owns it and its GCS port, so `down` can find
# its own clusters (client server included) even when cluster.json is damaged or gone.
OWNER_FILE = "rtjob-owner.json"
START_TIMEOUT_ENV, START_TIMEOUT_S = "RTJOB_LOCAL_START_TIMEOUT_S", 180.0  # one `ray start`
DASHBOARD_WAIT_ENV, DASHBOARD_WAIT_S = "RTJOB_LOCAL_DASHBOARD_WAIT_S", 60.0  # a live cluster's slow dashboard
NODE_POLL_S = 0.2  # how often a start asks the dashboard for its nodes (one small GET)
GCS_POLL_S = 0.05  # how often a new cluster's start looks whether the head's GCS can take the other nodes
PORTS_PER_NODE = 4  # dashboard agent (listen, gRPC), runtime_env agent, metrics export

Log = Callable[[str], None]


class DamagedState(Unreachable):
    """cluster.json cannot be trusted. Exit 3 (unreachable), not 2: the user's command and job are fine,
    rtjob just cannot reach a cluster it can vouch for; `rtjob local down` clears it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} is damaged ({problem}); nothing was stopped: `rtjob local down` stops "
                         f"this home's own cluster processes and clears it")
        self.path, self.problem = path, problem


@dataclass
class LocalCluster:
    address: str  # dashboard (Jobs API) URL
    gcs_address: str
    temp_dir: str
    token_path: str
    cpus_per_node: int
    started_at: float
    gpus_per_node: int = 0  # this machine's GPUs each node was started with (its own: node_gpu_env)

    @property
    def token(self) -> str:
        return Path(self.token_path).read_text().strip()

    @property
    def gcs_port(self) -> int:
        return int(self.gcs_address.rsplit(":", 1)[1])


def _state_file() -> Path:
    return state_dir() / "cluster.json"


def _token_file() -> Path:
    return state_dir() / "auth_token"


def _owner_id() -> str:
    return str(state_dir().resolve())


def _seconds(env_name: str, default: float) -> float:
    raw = os.environ.get(env_name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise BadInput(f"{env_name} must be a positive number of seconds, not {raw!r}")
    return value


# --- the state file: written privately and atomically, validated before use -----------------------------

def _temp_dir_problem(temp_dir: object) -> str | None:
    """Why ``temp_dir`` is not a folder rtjob created and owns, or None. Checked before anything is
    stopped or removed in its name: the temp dir decides which processes die."""
    if not isinstance(temp_dir, str) or not temp_dir:
        return "it records no temp_dir"
    path = Path(temp_dir)
    if os.path.normpath(temp_dir) != temp_dir or str(path.parent) != TEMP_ROOT:
        return f"temp_dir {temp_dir!r} is not a folder directly under {TEMP_ROOT}"
    if not re.fullmatch(re.escape(TEMP_PREFIX) + r"[A-Za-z0-9_]+", path.name):
        return f"temp_dir {temp_dir!r} is not named {TEMP_PREFIX}* (rtjob's own)"
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None  # already removed: its processes, if any, still carry the name
    except OSError as exc:
        return f"temp_dir {temp_dir!r} cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return f"temp_dir {temp_dir!r} is a link or not a folder"
    if info.st_uid != os.getuid():
        return f"temp_dir {temp_dir!r} belongs to another user (uid {info.st_uid})"
    owner = _owner_record(path).get("home")
    if owner is not None and owner != _owner_id():
        return f"temp_dir {temp_dir!r} belongs to another rtjob home ({owner})"
    return None


def _owner_record(temp_dir: Path) -> dict[str, Any]:
    """What rtjob wrote into a temp dir it created ({} for one an older rtjob made, or a damaged one)."""
    try:
        record = json.loads((temp_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _url_port(value: object, pattern: str) -> bool:
    match = re.fullmatch(pattern, value) if isinstance(value, str) else None
    return match is not None and 0 < int(match.group(1)) < 65536


def _state_problem(raw: object) -> str | None:
    """Why a parsed cluster.json cannot be trusted, or None."""
    names = {f.name for f in fields(LocalCluster)}
    optional = {"gpus_per_node"}  # a cluster started before rtjob gave nodes GPUs has none
    if not isinstance(raw, dict) or not names - optional <= set(raw) <= names:
        return f"it does not hold exactly {', '.join(sorted(names))}"
    if not isinstance(raw.get("gpus_per_node", 0), int):
        return "gpus_per_node is not a number"
    if not _url_port(raw["address"], r"http://127\.0\.0\.1:(\d+)"):
        return f"address {raw['address']!r} is not a local dashboard URL"
    if not _url_port(raw["gcs_address"], r"127\.0\.0\.1:(\d+)"):
        return f"gcs_address {raw['gcs_address']!r} is not a local GCS address"
    if raw["token_path"] != str(_token_file()):
        return f"token_path {raw['token_path']!r} is not {_token_file()}"
    if not isinstance(raw["cpus_per_node"], int) or not isinstance(raw["started_at"], (int, float)):
        return "cpus_per_node or started_at is not a number"
    return _temp_dir_problem(raw["temp_dir"])


def load_state() -> LocalCluster | None:
    """The recorded cluster, None if none is recorded; DamagedState if the record cannot be trusted."""
    path = _state_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DamagedState(path, f"unreadable: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except ValueError:
        raise DamagedState(path, "it is empty" if not text.strip() else "it is not JSON") from None
    problem = _state_problem(raw)
    if problem:
        raise DamagedState(path, problem)
    return LocalCluster(**raw)


# --- starting nodes --------------------------------------------------------------------------------------

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
    for name, value in RAY_SETTINGS.items():  # what a local run does not need; the user's own value wins
        env.setdefault(name, value)
    # Jobs run `python ...`: make that the Python rtjob runs in (its venv), as an activated venv would.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _node_ports(ports: list[int]) -> list[str]:
    """The flags giving one node's agents their own four ports: Ray's fixed defaults (52365, ...) collide
    between the nodes of one machine and with any other Ray cluster on it."""
    listen, grpc, runtime_env, metrics = ports
    return [
        "--dashboard-agent-listen-port", str(listen),
        "--dashboard-agent-grpc-port", str(grpc),
        "--runtime-env-agent-port", str(runtime_env),
        "--metrics-export-port", str(metrics),
    ]


def node_gpu_env(index: int, gpus_per_node: int) -> dict[str, str]:
    """Node ``index``'s (1 = the head) CUDA_VISIBLE_DEVICES: its own ``gpus_per_node`` of this machine's GPUs
    (jobspec/gpus.py), so that two nodes never train on one GPU; none (an empty list) without GPUs, so that a
    CPU node's workers never see one either."""
    from ...jobspec.gpus import machine_gpus, slices

    if gpus_per_node <= 0:
        return {"CUDA_VISIBLE_DEVICES": ""} if machine_gpus() else {}
    return {"CUDA_VISIBLE_DEVICES": slices(machine_gpus(), index, gpus_per_node)[index - 1]}


def _spawn_ray(args: list[str], token_path: str, what: str, extra_env: dict[str, str] | None = None,
               ) -> subprocess.Popen[str]:
    """Start one `ray start` without waiting for it (``_finish_ray`` waits)."""
    try:
        return subprocess.Popen([*_ray_executable(), *args], env={**_env(token_path), **(extra_env or {})},
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    except OSError as exc:
        raise Unreachable(f"could not {what}: {exc}") from None


def _finish_ray(proc: subprocess.Popen[str], what: str, deadline: float) -> None:
    """Wait for one `ray start` until ``deadline`` (monotonic); a time-out or a failure is an Unreachable
    with one line (the caller cleans up)."""
    try:
        stdout, stderr = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        timeout = _seconds(START_TIMEOUT_ENV, START_TIMEOUT_S)
        raise Unreachable(f"could not {what}: `ray start` did not finish within {timeout:g}s "
                          f"(set {START_TIMEOUT_ENV} to wait longer)") from None
    if proc.returncode != 0:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        raise Unreachable(f"could not {what}: {' | '.join(tail) or f'ray exited {proc.returncode}'}")


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


def _wait_nodes(cluster: LocalCluster, count: int, timeout: float = 60.0) -> list[dict[str, Any]] | None:
    """The alive nodes once there are at least ``count``, or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = alive_nodes(cluster)
        if nodes is not None and len(nodes) >= count:
            return nodes
        if time.monotonic() >= deadline:
            return None
        time.sleep(NODE_POLL_S)


def _require_nodes(cluster: LocalCluster, count: int) -> list[dict[str, Any]]:
    nodes = _wait_nodes(cluster, count)
    if nodes is None:
        raise Unreachable(f"the embedded cluster did not reach {count} node(s) within 60s")
    return nodes


def _start_head(cpus_per_node: int, say: Log, nodes: int = 1, gpus_per_node: int = 0) -> LocalCluster:
    """A new cluster's head node and, with ``nodes`` > 1, its other nodes: those start while the head's
    `ray start` still brings up its dashboard and raylet, as soon as its GCS can take them
    (``_gcs_ready``). Anything that goes wrong on the way stops what was started."""
    write_atomically(_token_file(), secrets.token_hex(32))
    temp_dir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=TEMP_ROOT)
    # Every port of every node at once, so no two of them can be the same.
    gcs_port, dash_port, client_port, *agent_ports = _free_ports(3 + PORTS_PER_NODE * nodes)
    (Path(temp_dir) / OWNER_FILE).write_text(json.dumps({"home": _owner_id(), "gcs_port": gcs_port}))
    say(f"starting the embedded Ray cluster (dashboard http://127.0.0.1:{dash_port})")
    cluster = LocalCluster(
        address=f"http://127.0.0.1:{dash_port}",
        gcs_address=f"127.0.0.1:{gcs_port}",
        temp_dir=temp_dir,
        token_path=str(_token_file()),
        cpus_per_node=cpus_per_node,
        started_at=time.time(),
        gpus_per_node=gpus_per_node,
    )
    # Record before starting, so `down` can clean up even a half-started cluster (if this rtjob dies).
    write_atomically(_state_file(), json.dumps(asdict(cluster), indent=2))
    what = "start the embedded Ray cluster"
    deadline = time.monotonic() + _seconds(START_TIMEOUT_ENV, START_TIMEOUT_S)
    others: dict[int, subprocess.Popen[str]] = {}
    try:
        head = _spawn_ray(
            [
                "start", "--head", "--port", str(gcs_port), "--dashboard-host", "127.0.0.1",
                "--dashboard-port", str(dash_port), "--ray-client-server-port", str(client_port),
                "--num-cpus", str(cpus_per_node), "--num-gpus", str(gpus_per_node), "--temp-dir", temp_dir,
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
                *_node_ports(agent_ports[:PORTS_PER_NODE]),
            ],
            cluster.token_path,
            what,
            node_gpu_env(1, gpus_per_node),
        )
        try:
            if nodes > 1:
                while head.poll() is None and not _gcs_ready(temp_dir) and time.monotonic() < deadline:
                    time.sleep(GCS_POLL_S)
                if head.poll() in (None, 0):  # a head that failed is reported below, with no node started
                    others = _spawn_nodes(cluster, 2, nodes, cpus_per_node, say, agent_ports[PORTS_PER_NODE:],
                                          gpus_per_node)
            _finish_ray(head, what, deadline)
            say("head node started; waiting for its dashboard")
        finally:
            if head.poll() is None:  # interrupted while waiting: `ray start` must not outlive the cleanup
                head.kill()
                head.wait()
        _require_nodes(cluster, 1)
        say(f"dashboard ready: {cluster.address}")
    except BaseException:
        for proc in others.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        _discard(cluster)  # the other nodes' folders lie under the head's: they are stopped with it
        raise
    if others:
        _join_nodes(cluster, others, say)
        _require_nodes(cluster, nodes)  # so that `up` counts them all and adds none again
    return cluster


def _gcs_ready(temp_dir: str) -> bool:
    """Whether the head's GCS already holds the session name a joining node asks it for (a node that asks
    too early waits in Ray's 2-second retry loop): Ray starts the autoscaler monitor, whose log is
    ``logs/monitor.out``, right after writing it. If that ever stops being true, nodes start once the
    head's `ray start` has finished, as before."""
    return any(Path(temp_dir).glob("session_*/logs/monitor.out"))


def _add_nodes(cluster: LocalCluster, first: int, nodes: int, cpus_per_node: int, say: Log) -> None:
    """Add nodes ``first``..``nodes`` to a running cluster, all at once (``_spawn_nodes``, ``_join_nodes``), with
    the GPUs per node the cluster was started with."""
    _join_nodes(cluster, _spawn_nodes(cluster, first, nodes, cpus_per_node, say, None, cluster.gpus_per_node), say)


def _spawn_nodes(cluster: LocalCluster, first: int, nodes: int, cpus_per_node: int, say: Log,
                 ports: list[int] | None = None, gpus_per_node: int = 0) -> dict[int, subprocess.Popen[str]]:
    """Start `ray start --address` for nodes ``first``..``nodes`` together, without waiting for them. Every
    node's ports are chosen up front (``ports``, or free ones chosen together here; the caller holds the
    cluster lock, so no other rtjob picks ports meanwhile)."""
    indexes = list(range(first, nodes + 1))
    say(f"adding node {first}/{nodes} to the embedded cluster" if len(indexes) == 1 else
        f"adding nodes {first}-{nodes}/{nodes} to the embedded cluster, in parallel")
    ports = ports or _free_ports(PORTS_PER_NODE * len(indexes))
    # Each node its own temp dir (Ray >= 2.51 honours --temp-dir on a worker node), as on separate
    # machines: in the head's folder, a second node's runtime_env agent deleted and re-unpacked a
    # running job's working dir, and a second log monitor printed every worker line twice. Under
    # the cluster's own temp dir, so `down` finds and removes it with the rest.
    started: dict[int, subprocess.Popen[str]] = {}
    try:
        for slot, index in enumerate(indexes):
            node_dir = os.path.join(cluster.temp_dir, f"n{index}")
            os.makedirs(node_dir, exist_ok=True)
            args = [
                "start", "--address", cluster.gcs_address, "--num-cpus", str(cpus_per_node),
                "--num-gpus", str(gpus_per_node), "--object-store-memory", str(OBJECT_STORE_BYTES), "--temp-dir", node_dir,
                "--disable-usage-stats", *_node_ports(ports[slot * PORTS_PER_NODE:(slot + 1) * PORTS_PER_NODE]),
            ]
            started[index] = _spawn_ray(args, cluster.token_path, f"add node {index} to the embedded cluster",
                                        node_gpu_env(index, gpus_per_node))
    except BaseException:  # a node could not be spawned: none of these stays half-started
        _stop_nodes(cluster, started, indexes)
        raise
    return started


def _join_nodes(cluster: LocalCluster, started: dict[int, subprocess.Popen[str]], say: Log | None = None) -> None:
    """Wait for each started node's `ray start` (``say``: a line as each one has joined). If any fails, the nodes
    that failed are stopped (the others and the head are fine, as when one node of a sequence failed) and the
    first failure is reported in one line."""
    deadline = time.monotonic() + _seconds(START_TIMEOUT_ENV, START_TIMEOUT_S)
    failed: dict[int, Unreachable] = {}
    joined: set[int] = set()
    try:
        for index, proc in started.items():
            try:
                _finish_ray(proc, f"add node {index} to the embedded cluster", deadline)
                joined.add(index)
                if say is not None:
                    say(f"node {index} joined")
            except Unreachable as exc:
                failed[index] = exc
    except BaseException:  # interrupted: no half-started node stays
        _stop_nodes(cluster, started, [index for index in started if index not in joined])
        raise
    if failed:
        _stop_nodes(cluster, started, list(failed))
        also = f" ({len(failed) - 1} more node(s) failed too)" if len(failed) > 1 else ""
        raise Unreachable(f"{failed[min(failed)]}{also}")


def _stop_nodes(cluster: LocalCluster, started: dict[int, subprocess.Popen[str]], indexes: list[int]) -> None:
    """Stop these nodes' `ray start` (if still running) and every process of theirs; remove their dirs."""
    for index in indexes:
        proc = started.get(index)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        node_dir = os.path.join(cluster.temp_dir, f"n{index}")
        _stop(_processes_in(node_dir))  # only the half-started nodes: the rest of the cluster is fine
        shutil.rmtree(node_dir, ignore_errors=True)


# --- reusing: alive, slow, or gone -----------------------------------------------------------------------

def _reusable(cluster: LocalCluster | None, say: Log) -> LocalCluster | None:
    """The recorded cluster if it runs (waiting for a slow dashboard), None if it is gone (then cleared)."""
    if cluster is None or alive_nodes(cluster) is not None:
        return cluster
    if not gcs_runs_in(cluster.temp_dir):
        say("the embedded cluster recorded in state is gone; starting a new one")
        _discard(cluster)
        return None
    # Its GCS runs: a busy machine or a stopped dashboard, not a dead cluster. Never kill it for that.
    wait = _seconds(DASHBOARD_WAIT_ENV, DASHBOARD_WAIT_S)
    say(f"the embedded cluster runs but its dashboard {cluster.address} does not answer; waiting up to {wait:g}s")
    if _wait_nodes(cluster, 1, timeout=wait) is not None:
        return cluster
    raise Unreachable(f"the embedded cluster's dashboard {cluster.address} did not answer within {wait:g}s "
                      f"while its processes run (nothing was stopped): retry, or `rtjob local down` to stop it")


def _running_as_asked(nodes: int, cpus_per_node: int, gpus_per_node: int) -> LocalCluster | None:
    """The recorded cluster when it runs with the asked shape, found without the lock, so submits to a running
    cluster ask Ray at once instead of one after another (the lock guards starting, growing and stopping).
    None sends the caller to the locked path: nothing recorded, a damaged record, no answer, too few nodes,
    another shape, or a `local down` under way (its marker, looked at again after Ray's answer)."""
    with contextlib.suppress(DamagedState):
        cluster = None if stopping.under_way() else load_state()
        if cluster is None or cluster.gpus_per_node != gpus_per_node:
            return None
        found = alive_nodes(cluster)
        if found is None or len(found) < nodes or (
                cluster.cpus_per_node < cpus_per_node and cluster.cpus_per_node * len(found) < cpus_per_node * nodes):
            return None
        if not stopping.under_way() and load_state() == cluster:
            return cluster
    return None


def up(nodes: int = 1, cpus_per_node: int = 1, log: Log | None = None, gpus_per_node: int = 0) -> LocalCluster:
    """Start the embedded cluster, or reuse it; add nodes until it has at least ``nodes``. With
    ``gpus_per_node``, each node gets its own that many of this machine's GPUs."""
    running = _running_as_asked(nodes, cpus_per_node, gpus_per_node)
    if running is not None:
        return running
    say = log or (lambda msg: None)
    with _locked(say):
        stopping.clear_stale()  # the lock is ours: a marker left now is a crashed `down`'s
        cluster = _reusable(load_state(), say) or _start_head(cpus_per_node, say, nodes, gpus_per_node)
        if cluster.gpus_per_node != gpus_per_node:
            say(f"the embedded cluster runs with {cluster.gpus_per_node} GPU per node, this job asks for "
                f"{gpus_per_node}: `rtjob local down` lets the next submit start it at that size")
        # Counted from an answer, never from a missed one: a dashboard that blinks must not add every node again.
        current = len(_require_nodes(cluster, 1))
        if cluster.cpus_per_node < cpus_per_node and cluster.cpus_per_node * current < cpus_per_node * nodes:
            # A running cluster is never restarted under runs that may be using it.
            say(f"the embedded cluster runs with {cluster.cpus_per_node} CPU per node, this job asks for "
                f"{cpus_per_node}: `rtjob local down` lets the next submit start it at that size")
        if nodes > current:
            _add_nodes(cluster, current + 1, nodes, cpus_per_node, say)
            _require_nodes(cluster, nodes)
        return cluster


# --- stopping exactly our processes (found by cluster_processes.py) ----------------------------------------

def _stop_dir(temp_dir: str, gcs_port: int | None = None, say: Log | None = None) -> int:
    """Stop one validated cluster temp dir's processes and remove the folder; ``say`` says what stops, before
    the wait for them to end (Ray's daemons take seconds)."""
    procs = _processes_in(temp_dir, gcs_port)
    if say is not None and procs:
        nodes = sum(1 for p in procs if process_name(p) == "raylet")
        say(f"stopping the embedded cluster: {nodes} node(s), {len(procs)} processes" if nodes else
            f"stopping {len(procs)} process(es) of the embedded cluster")
    count = _stop(procs)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return count


def _discard(cluster: LocalCluster, say: Log | None = None) -> int:
    count = _stop_dir(cluster.temp_dir, cluster.gcs_port, say)
    _state_file().unlink(missing_ok=True)
    return count


def _own_temp_dirs() -> list[tuple[str, int | None]]:
    """(temp dir, GCS port) of each cluster rtjob started for this RTJOB_HOME (its owner file says so),
    whatever cluster.json says."""
    found = []
    for path in sorted(Path(TEMP_ROOT).glob(f"{TEMP_PREFIX}*")):
        record = _owner_record(path)
        if record.get("home") == _owner_id() and _temp_dir_problem(str(path)) is None:
            port = record.get("gcs_port")
            found.append((str(path), port if isinstance(port, int) else None))
    return found


def down(log: Log | None = None) -> int:
    """Stop the embedded cluster's processes (only those). Returns how many processes were ended.

    Also stops any other cluster this RTJOB_HOME left behind (its owner file names this home), so a
    damaged cluster.json is reported and cleared, while what is really rtjob's still stops."""
    say = log or (lambda msg: None)
    with _locked(say), stopping.marked():
        try:
            cluster = load_state()
        except DamagedState as exc:
            say(f"{exc.path} is damaged ({exc.problem}); stopping only this home's own clusters")
            cluster = None
        count = _discard(cluster, say) if cluster is not None else 0
        for temp_dir, gcs_port in _own_temp_dirs():
            count += _stop_dir(temp_dir, gcs_port, say)
        _state_file().unlink(missing_ok=True)
        return count


def require() -> LocalCluster:
    cluster = load_state()
    if cluster is None or alive_nodes(cluster) is None:
        raise Unreachable("the embedded Ray cluster is not running (rtjob submit or rtjob local up starts it)")
    return cluster


def status() -> dict[str, Any] | None:
    """The running cluster as `rtjob local status` shows it; None when none is recorded (not running: an answer).
    DamagedState when its record cannot be trusted or names a cluster whose processes are gone, Unreachable when
    its processes run but its dashboard does not answer."""
    cluster = load_state()
    if cluster is None:
        return None
    if alive_nodes(cluster) is None:
        if not gcs_runs_in(cluster.temp_dir):
            raise DamagedState(_state_file(), "the cluster it records is gone")
        raise Unreachable(f"the embedded cluster's dashboard {cluster.address} does not answer while its "
                          f"processes run: retry, or `rtjob local down` to stop it")
    return describe(cluster)


def describe(cluster: LocalCluster) -> dict[str, Any]:
    """The cluster as `rtjob local status` shows it: address, alive nodes, CPUs, GPUs, its temp dir."""
    nodes = alive_nodes(cluster) or []
    cpus = sum(float((n.get("resources_total") or {}).get("CPU", 0)) for n in nodes)
    gpus = sum(float((n.get("resources_total") or {}).get("GPU", 0)) for n in nodes)
    return {"address": cluster.address, "nodes": len(nodes), "cpus": cpus, "gpus": gpus,
            "gpus_per_node": cluster.gpus_per_node, "temp_dir": cluster.temp_dir}
