"""A script that knows nothing of rtjob (Ray's own torch_linear_example), through a two-line job file, on the
embedded cluster: it runs its own --num-workers to SUCCEEDED, and when it asks for GPUs the cluster does not
have, the follower says what is missing and ends (exit 2) instead of following for ever."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.cli import new_id, rtjob, wait_for_status

pytestmark = pytest.mark.cluster

EXAMPLE = "python -m ray.train.examples.pytorch.torch_linear_example --num-workers 2 --epochs 1"


def _two_line_job(folder: Path, name: str, entrypoint: str) -> Path:
    folder.mkdir()
    job = folder / f"{name}.yaml"
    job.write_text(f"name: {name}\nentrypoint: {entrypoint}\n")
    return job


def test_a_script_unaware_of_rtjob_runs_its_own_workers(cluster_env, tmp_path):
    job = _two_line_job(tmp_path / "proj", "linear", EXAMPLE)
    run_id = new_id("linear")
    proc = rtjob("submit", str(job), "--submission-id", run_id, env=cluster_env, timeout=400, cwd=job.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert f"{run_id} SUCCEEDED" in proc.stderr
    assert "shape set by the entrypoint" in proc.stderr and "worker(s)" not in proc.stderr
    env_line = rtjob("render", str(job), "-o", "json", env=cluster_env, cwd=job.parent).stdout
    assert "RTJOB_NUM_WORKERS" not in env_line and '"workers": null' in env_line


def test_a_script_asking_for_gpus_the_cluster_lacks_is_stopped_with_what_is_missing(cluster_env, tmp_path):
    job = _two_line_job(tmp_path / "proj", "linear-gpu", EXAMPLE + " --use-gpu")
    run_id = new_id("gpu")
    env = {**cluster_env, "RTJOB_STUCK_GRACE_S": "5"}
    started = time.monotonic()
    proc = rtjob("submit", str(job), "--submission-id", run_id, "-o", "json", env=env, timeout=400, cwd=job.parent)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr
    assert time.monotonic() - started < 300
    assert "GPU: needs 2, cluster has 0" in proc.stderr, proc.stderr
    assert f"run {run_id} was stopped" in proc.stderr
    doc = json.loads(proc.stdout)  # CI still gets the run: its id, its status as the stop left it, and the error
    assert doc["id"] == run_id and doc["status"] == "STOPPED" and f"run {run_id} was stopped" in doc["error"]
    assert wait_for_status(cluster_env, run_id, {"STOPPED"}) == "STOPPED"
