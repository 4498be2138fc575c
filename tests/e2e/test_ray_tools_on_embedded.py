"""Ray's own tools against the real embedded cluster (issue 24 item 7): after `eval "$(rtjob local env)"` Ray's
CLI (`ray job list`, `ray status`) reaches the session cluster, rtjob still takes it as the `local` backend, and a
task started by the job sees the cluster's GCS address as RAY_ADDRESS (Ray gives it to the driver only: Ray
Train's clean-up actor failed without it when two Ray instances ran on one machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import new_id, record, rtjob

pytestmark = pytest.mark.cluster

BIN = Path(sys.executable).parent
TASK = """\
import os

import ray


@ray.remote
def address():
    return os.environ.get("RAY_ADDRESS")


ray.init()
print("task sees", ray.get(address.remote()))
"""


def test_rays_cli_and_a_jobs_tasks_reach_the_embedded_cluster(cluster_env, tmp_path):
    exports = rtjob("local", "env", env=cluster_env)
    assert exports.returncode == 0, exports.stderr
    names = [line.split("=", 1)[0] for line in exports.stdout.splitlines()]
    assert names == ["export RAY_API_SERVER_ADDRESS", "export RAY_ADDRESS", "export RAY_AUTH_MODE",
                     "export RAY_AUTH_TOKEN_PATH"]
    gcs = next(line.split("=", 1)[1] for line in exports.stdout.splitlines() if line.startswith("export RAY_ADDRESS="))

    rtjob_cmd = f"{sys.executable} -m rtjob.main"
    env = {**cluster_env, "PATH": f"{BIN}:/usr/bin:/bin"}

    def in_shell(commands: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", f'set -e; eval "$({rtjob_cmd} local env)"; {commands}'], env=env,
                              capture_output=True, text=True, timeout=180)

    # Ray's own CLI prints what Ray keeps, other runs' secret env values and args included (Ray keeps a runtime_env
    # in plain text): Ray's output, not rtjob's, so it is not recorded for the suite-wide secret check.
    ray_tools = in_shell(f'{BIN / "ray"} job list; {BIN / "ray"} status')
    assert ray_tools.returncode == 0, ray_tools.stderr[-3000:]
    assert "Active:" in ray_tools.stdout  # ray status: the cluster's nodes
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "task.py").write_text(TASK)
    (tmp_path / "task.yaml").write_text(f"name: task\nentrypoint: python task.py\nworking_dir: {tmp_path / 'wd'}\n")
    shell = in_shell(f'{rtjob_cmd} render {tmp_path / "task.yaml"} --explain -o json')
    record(shell.stdout, shell.stderr)
    assert shell.returncode == 0, shell.stderr[-3000:]
    rendered = json.loads(shell.stdout)
    assert rendered["backend"] == "local", rendered["explain"]["backend"]
    assert rendered["submit_job"]["runtime_env"]["env_vars"]["RAY_ADDRESS"] == gcs

    run_id = new_id("task")
    submit = rtjob("submit", str(tmp_path / "task.yaml"), "--submission-id", run_id, env=cluster_env, timeout=300)
    assert submit.returncode == 0, submit.stderr[-3000:]
    assert f"task sees {gcs}" in submit.stdout + submit.stderr
