"""A queue on a cluster an autoscaler grows (issue 44). The cluster starts as its head alone (1 CPU); its autoscaler
may add one 2-CPU node. A run declaring a 2-CPU worker fits no node the cluster has: `submit --queue` takes it,
saying it needs the autoscaler (a cluster with none refuses it, exit 2: test_run_control), the keeper asks the
autoscaler for it (Ray's request_resources: nothing else would, as a queued run has not reached Ray), the node
joins, the run is admitted, places its 2-CPU placement group on the new node and succeeds with no client alive;
then the keeper withdraws its ask and the autoscaler removes the idle node. A run of two 2-CPU workers can never
fit, even grown to its largest (the head and one 2-CPU node): queued before the keeper ran, it waits as "can never
fit" and is not asked for; once the keeper has read the cluster's autoscaling config, such a submit is refused
(exit 2, nothing queued), and so is a pipeline with such a step (before any step runs or its record is written).

The autoscaler is Ray's own; Ray's fake multi-node provider stands in for a cloud's machines (support/autoscaling.py):
a launched node is a node's processes on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from support.autoscaling import alive_nodes, autoscaling_cluster
from support.cli import base_env, new_id, rtjob
from support.project import write_files
from support.ray_jobs import wait_for

pytestmark = pytest.mark.cluster

PLACE = """import ray

ray.init()
group = ray.util.placement_group([{"CPU": 2}])
ray.get(group.ready(), timeout=180)
print("placed on the grown node")
"""


def test_a_queued_run_bigger_than_the_cluster_is_asked_of_its_autoscaler_and_runs(tmp_path: Path) -> None:
    with autoscaling_cluster(tmp_path / "cluster", head_cpus=1, worker={"CPU": 2}) as cluster:
        project, queue = tmp_path / "project", "grow"
        write_files(project, {
            "pyproject.toml": f'[tool.rtjob]\nstorage = "{tmp_path / "runs"}"\n\n[tool.rtjob.queues.{queue}]\n',
            "jobs/grow.yaml": "name: grow\nresources_per_worker:\n  cpus: 2\nentrypoint: python jobs/place.py\n",
            "jobs/place.py": PLACE,
            "jobs/huge.yaml": "name: huge\nnodes: 2\nresources_per_worker:\n  cpus: 2\nentrypoint: python -c 'pass'\n",
            "jobs/flow.yaml": "name: flow\nsteps:\n  - name: small\n    entrypoint: python -c 'pass'\n"
                              "  - name: big\n    nodes: 2\n    resources_per_worker:\n      cpus: 2\n"
                              "    entrypoint: python -c 'pass'\n",
        })
        env = base_env(tmp_path / "home", RAY_ADDRESS=cluster.address)
        assert alive_nodes(cluster) == 1
        huge = new_id("huge")  # before any keeper ran: the cluster's largest shape is not known yet
        done = rtjob("submit", "huge", "--queue", queue, "--submission-id", huge, "--no-wait", env=env, cwd=project,
                     timeout=240)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        run_id = new_id("grow")
        done = rtjob("submit", "grow", "--queue", queue, "--submission-id", run_id, "--no-wait", env=env, cwd=project,
                     timeout=240)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        assert "needs the autoscaler" in done.stderr, done.stderr

        def job() -> dict | None:
            resp = requests.get(f"{cluster.address}/api/jobs/{run_id}", timeout=10)
            return None if resp.status_code == 404 else resp.json()

        wait_for(lambda: alive_nodes(cluster) == 2, 240, "the autoscaler to add the node the keeper asked for")
        assert wait_for(lambda: (job() or {}).get("status") in ("SUCCEEDED", "FAILED", "STOPPED") and job(), 300,
                        "the admitted run to end")["status"] == "SUCCEEDED"
        logs = requests.get(f"{cluster.address}/api/jobs/{run_id}/logs", timeout=10).json()["logs"]
        assert "placed on the grown node" in logs, logs[-2000:]
        status = rtjob("status", run_id, "-o", "json", env=env, cwd=project, timeout=120)
        assert json.loads(status.stdout)["status"] == "SUCCEEDED", status.stderr
        def queued() -> list[dict]:
            return json.loads(rtjob("queue", queue, "-o", "json", env=env, cwd=project, timeout=120).stdout)

        def without_grow() -> list[dict] | None:
            now = queued()
            return None if any(e["id"] == run_id for e in now) else now

        listed = wait_for(without_grow, 120, "the ended run to leave its queue")
        assert [e["id"] for e in listed] == [huge], listed
        assert "can never fit this cluster: needs 2 × 2 CPU" in listed[0]["reason"], listed
        header = rtjob("queue", queue, env=env, cwd=project, timeout=120).stderr
        assert "grown to its largest: 1 node of 1 CPU, 1 node of 2 CPU" in header, header
        again = rtjob("submit", "huge", "--queue", queue, "--submission-id", new_id("huge"), "--no-wait", env=env,
                      cwd=project, timeout=240)
        assert again.returncode == 2, (again.stdout[-2000:], again.stderr[-3000:])
        assert ("2 × 2 CPU can never fit queue grow's cluster, even grown to its largest (1 node of 1 CPU, "
                "1 node of 2 CPU: its autoscaling config ") in again.stderr, again.stderr
        assert "Traceback" not in again.stderr and "needs the autoscaler" not in again.stderr
        flow = rtjob("submit", "flow", "--queue", queue, "--submission-id", new_id("flow"), "--no-wait", env=env,
                     cwd=project, timeout=240)  # a pipeline whose second step can never fit: before anything runs
        assert flow.returncode == 2 and "2 × 2 CPU can never fit queue grow's cluster" in flow.stderr, flow.stderr
        assert [e["id"] for e in queued()] == [huge] and not (tmp_path / "runs" / "flow").exists()  # nothing queued
        wait_for(lambda: alive_nodes(cluster) == 1, 240, "the keeper's ask withdrawn and the idle node removed")
