"""Extra nodes of the embedded cluster start in parallel (issue 13, part 4), offline: `ray start` is replaced
by a small Python process that records its arguments and waits until every node's process has started, so a
sequential start would never finish. No Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rtjob.backends.ray import cluster, cluster_lock
from rtjob.core.errors import Unreachable

# Each fake `ray start`: write its arguments, wait (up to 30 s) until `expected` such files exist, then fail
# with "boom" if it is the node named by `fail`. A head first writes the log Ray's autoscaler monitor opens
# once the GCS holds the session name (what rtjob waits for before it starts the other nodes).
FAKE_RAY_START = """
import json, os, sys, time
folder, expected, fail, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
node = "head" if "--head" in args else os.path.basename(args[args.index("--temp-dir") + 1])
if node == "head":
    logs = os.path.join(args[args.index("--temp-dir") + 1], "session_1", "logs")
    os.makedirs(logs)
    open(os.path.join(logs, "monitor.out"), "w").close()
with open(os.path.join(folder, node + ".json"), "w") as f:
    json.dump(args, f)
deadline = time.monotonic() + 30
while len([n for n in os.listdir(folder) if n.endswith(".json")]) < expected:
    if time.monotonic() > deadline:
        sys.exit("never saw the other nodes start: started one after another?")
    time.sleep(0.01)
if node == fail:
    sys.exit("boom")
"""


def _fake_cluster(tmp_path: Path) -> cluster.LocalCluster:
    temp_dir = tmp_path / "cluster"
    temp_dir.mkdir()
    return cluster.LocalCluster(address="http://127.0.0.1:1", gcs_address="127.0.0.1:2", temp_dir=str(temp_dir),
                                token_path=str(tmp_path / "token"), cpus_per_node=1, started_at=0.0)


def _patch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, expected: int, fail: str = "") -> list[str]:
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setattr(cluster, "_spawn_ray", lambda args, token_path, what, extra_env=None: subprocess.Popen(
        [sys.executable, "-c", FAKE_RAY_START, str(seen), str(expected), fail, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    stopped: list[str] = []
    monkeypatch.setattr(cluster, "_processes_in", lambda temp_dir, gcs_port=None: [temp_dir])
    monkeypatch.setattr(cluster, "_stop", lambda procs, grace=10.0: stopped.extend(procs) or len(procs))
    return stopped


def _started(tmp_path: Path) -> dict[str, list[str]]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp_path / "seen").glob("*.json")}


def _agent_ports(started: dict[str, list[str]]) -> list[str]:
    return [args[args.index(flag) + 1] for args in started.values() for flag in
            ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
             "--metrics-export-port")]


def test_extra_nodes_start_together_each_with_its_own_folder_and_ports(monkeypatch, tmp_path):
    found = _fake_cluster(tmp_path)
    stopped = _patch(monkeypatch, tmp_path, expected=3)
    heard: list[str] = []
    cluster._add_nodes(found, 2, 4, 1, heard.append)

    assert heard == ["adding nodes 2-4/4 to the embedded cluster, in parallel",  # a line per stage, as it happens
                     "node 2 joined", "node 3 joined", "node 4 joined"]
    started = _started(tmp_path)
    assert sorted(started) == ["n2", "n3", "n4"]
    ports = _agent_ports(started)
    assert len(set(ports)) == 12, ports  # chosen up front, no two nodes share one
    for node, args in started.items():
        assert args[args.index("--temp-dir") + 1] == f"{found.temp_dir}/{node}"
        assert args[args.index("--address") + 1] == found.gcs_address
    assert stopped == []


def test_a_node_that_fails_is_named_in_one_line_and_only_it_is_cleaned_up(monkeypatch, tmp_path):
    found = _fake_cluster(tmp_path)
    stopped = _patch(monkeypatch, tmp_path, expected=2, fail="n3")
    with pytest.raises(Unreachable) as caught:
        cluster._add_nodes(found, 2, 3, 1, lambda msg: None)

    assert str(caught.value) == "could not add node 3 to the embedded cluster: boom"
    assert stopped == [f"{found.temp_dir}/n3"]  # node 2 joined: it stays, as the head does
    assert Path(found.temp_dir, "n2").is_dir() and not Path(found.temp_dir, "n3").exists()


def test_a_new_clusters_nodes_start_while_the_head_still_starts(monkeypatch, tmp_path):
    """The head's fake `ray start` ends only once both other nodes have started: a start that waited for the
    head first would never finish."""
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    cluster_lock.make_state_dir()
    _patch(monkeypatch, tmp_path, expected=3)
    monkeypatch.setattr(cluster, "_require_nodes", lambda found, count: [{}] * count)
    started = cluster._start_head(1, lambda msg: None, nodes=3)
    try:
        assert sorted(_started(tmp_path)) == ["head", "n2", "n3"]
        assert len(set(_agent_ports(_started(tmp_path)))) == 12
        assert cluster.load_state() == started
    finally:
        cluster._discard(started)
