"""The embedded cluster on a machine with GPUs (rtjob/jobspec/gpus.py, backends/ray/cluster.py, jobspec/resolve.py).

No GPU can run here, so ``nvidia-smi`` is a fake: a script on PATH that prints what the real one prints for
``--query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`` on a 4-GPU machine. What is tested is
rtjob's side: discovery (and the user's CUDA_VISIBLE_DEVICES), each node's own GPUs in its `ray start` command line
and environment, the job's shape and render's lines, and the refusal of more GPUs than the machine has."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from rtjob.backends.ray import cluster
from rtjob.jobspec.gpus import machine_gpus, slices
from support.cli import base_env, run_in_process

A10G = [f"{i}, GPU-{i}aaa{i}-0000-1111, NVIDIA A10G, 23028" for i in range(4)]


def fake_smi(folder: Path, lines: list[str], query: str = "index,uuid,name,memory.total") -> str:
    """A folder holding a fake `nvidia-smi` (it checks it was asked ``query``, the one rtjob sends: the inventory's
    here, the utilisation's in test_live_rows.py); returns a PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      f'[ "$1" = "--query-gpu={query}" ] || exit 9\n'
                      + "".join(f"echo '{line}'\n" for line in lines))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_discovery_reads_nvidia_smi_and_honours_the_users_cuda_visible_devices(tmp_path):
    path = fake_smi(tmp_path / "bin", A10G)
    assert [g.index for g in machine_gpus({"PATH": path})] == ["0", "1", "2", "3"]
    assert machine_gpus({"PATH": path})[0].describe() == "0: NVIDIA A10G (22 GiB)"
    assert [g.index for g in machine_gpus({"PATH": path, "CUDA_VISIBLE_DEVICES": "3,1"})] == ["3", "1"]
    assert [g.index for g in machine_gpus({"PATH": path, "CUDA_VISIBLE_DEVICES": "GPU-2aaa2"})] == ["2"]
    assert machine_gpus({"PATH": path, "CUDA_VISIBLE_DEVICES": ""}) == ()
    assert machine_gpus({"PATH": path, "CUDA_VISIBLE_DEVICES": "-1"}) == ()
    assert machine_gpus({"PATH": str(tmp_path / "empty")}) == ()  # no nvidia-smi: a machine without GPUs
    assert slices(machine_gpus({"PATH": path}), 2, 2) == ["0,1", "2,3"]


def test_each_node_starts_with_its_own_gpus_in_its_ray_start_command_and_environment(tmp_path, monkeypatch):
    """`ray start` is a recording script here (it writes its argv and CUDA_VISIBLE_DEVICES, then exits 0): the
    command lines and environments are rtjob's real ones."""
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "bin", A10G))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    seen = tmp_path / "seen"
    seen.mkdir()
    ray = tmp_path / "ray"
    ray.write_text(f"#!{sys.executable}\nimport json, os, sys, uuid\n"
                   f"open(os.path.join({str(seen)!r}, uuid.uuid4().hex), 'w').write(json.dumps("
                   "[sys.argv[1:], os.environ.get('CUDA_VISIBLE_DEVICES')]))\n")
    ray.chmod(0o755)
    monkeypatch.setattr(cluster, "_ray_executable", lambda: [str(ray)])
    state = cluster.LocalCluster(address="http://127.0.0.1:1", gcs_address="127.0.0.1:2", temp_dir=str(tmp_path),
                                 token_path=str(tmp_path / "token"), cpus_per_node=1, started_at=0.0, gpus_per_node=2)
    cluster._join_nodes(state, cluster._spawn_nodes(state, 2, 2, 1, lambda _: None, None, 2))
    [(argv, visible)] = [json.loads(f.read_text()) for f in seen.iterdir()]
    assert argv[argv.index("--num-gpus") + 1] == "2" and visible == "2,3"  # node 2: the second pair
    assert cluster.node_gpu_env(1, 2) == {"CUDA_VISIBLE_DEVICES": "0,1"}  # the head: the first pair
    assert cluster.node_gpu_env(1, 0) == {"CUDA_VISIBLE_DEVICES": ""}  # a CPU node on a GPU machine sees none


@pytest.fixture()
def gpu_env(tmp_path) -> dict[str, str]:
    return base_env(tmp_path / "home", PATH=fake_smi(tmp_path / "bin", A10G[:2]))  # a 2-GPU workstation


def test_a_gpu_job_keeps_its_gpus_on_the_embedded_cluster_and_render_says_which_profile(gpu_env):
    out = run_in_process("render", "ddp-vit", "--submission-id", "g-1", "-o", "json", env=gpu_env)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)["run"]
    assert (run["nodes"], run["workers"], run["gpus_per_node"], run["profile"]) == (2, 2, 1, "local")
    assert run["resources_per_worker"]["GPU"] == 1
    text = run_in_process("render", "ddp-vit", "--submission-id", "g-2", "--real-shape", env=gpu_env).stdout
    assert "embedded:  the job as written (--real-shape" in text and "1 GPU per node" in text
    cpu = json.loads(run_in_process("render", "ddp-vit", "--submission-id", "g-3", "-o", "json",
                                    "--set", "resources_per_worker.gpus=0", env=gpu_env).stdout)["run"]
    assert cpu["gpus_per_node"] == 0 and "GPU" not in cpu["resources_per_worker"]


def refusal(out) -> list[str]:
    """A bad-input answer's lines (exit 2 asserted)."""
    assert out.returncode == 2, out.stderr
    return out.stderr.strip().splitlines()


def test_more_gpus_than_the_machine_has_is_one_line_and_exit_2(gpu_env):
    assert refusal(run_in_process("submit", "ddp-vit", "--nodes", "3", "--submission-id", "g-4", env=gpu_env)) == [
        "rtjob: error: jobs/ddp-vit.yaml: 3 node(s) x 1 GPU per worker need 3 GPU(s); this machine has 2 (0: NVIDIA A10G "
        "(22 GiB); 1: NVIDIA A10G (22 GiB)): use --nodes 2, or --set resources_per_worker.gpus=0 to train on CPUs"]


def test_a_machine_without_gpus_resolves_as_before(tmp_path):
    env = base_env(tmp_path / "home", PATH=f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    run = json.loads(run_in_process("render", "ddp-vit", "--submission-id", "g-5", "-o", "json", env=env).stdout)["run"]
    assert run["gpus_per_node"] == 0 and "GPU" not in run["resources_per_worker"] and run["profile"] == "local"


def test_local_up_refuses_more_gpus_than_the_machine_has_before_starting_anything(gpu_env):
    assert refusal(run_in_process("local", "up", "--nodes", "2", "--gpus-per-node", "2", env=gpu_env)) == [
        "rtjob: error: --nodes 2 x --gpus-per-node 2 needs 4 GPU(s); this machine has 2 (0: NVIDIA A10G (22 GiB); "
        "1: NVIDIA A10G (22 GiB))"]
    assert not (Path(gpu_env["RTJOB_HOME"]) / "local" / "cluster.json").exists()
