"""`rtjob submit --queue` for real, through the CLI on the session's embedded cluster (folder storage): two runs
submitted --no-wait to a held queue are QUEUED in order with their positions; `rtjob stop` of one cancels it and it
never reaches Ray; once released, the other is admitted and runs with no client alive, and `rtjob wait` follows it
to SUCCEEDED. Observed through the CLI's JSON and Ray's Jobs API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import new_id, rtjob
from support.project import write_files
from support.ray_jobs import JobsAPI, ended, wait_for

pytestmark = pytest.mark.cluster


def test_a_held_queue_orders_submits_a_stop_cancels_one_and_release_runs_the_other(cluster_env, tmp_path: Path) -> None:
    project, queue = tmp_path / "project", new_id("team").replace("-", "")[:20]
    write_files(project, {
        "pyproject.toml": f'[tool.rtjob]\nstorage = "{tmp_path / "runs"}"\n\n[tool.rtjob.queues.{queue}]\nmax_running = 1\n',
        "jobs/hello.yaml": "name: hello\nentrypoint: python -c \"print('hello from the queue')\"\n",
    })
    env, api = dict(cluster_env), JobsAPI(cluster_env)

    def cli(*args: str) -> str:
        done = rtjob(*args, env=env, cwd=project, timeout=240)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        return done.stdout

    cli("queue", "hold", queue)
    first, second = new_id("qfirst"), new_id("qsecond")
    cli("submit", "hello", "--queue", queue, "--submission-id", first, "--no-wait")
    cli("submit", "hello", "--queue", queue, "--priority", "5", "--submission-id", second, "--no-wait")

    def listed() -> list[dict]:
        return json.loads(cli("queue", queue, "-o", "json"))

    wait_for(lambda: [(r["id"], r["position"]) for r in listed()] == [(second, 1), (first, 2)], 120,
             "the keeper to order both (the higher priority first)")
    status = json.loads(cli("status", first, "-o", "json"))
    assert status["status"] == "QUEUED" and f"position 2 of 2 in {queue}" in status["message"], status

    cli("stop", first)  # cancelled while queued: it never reaches Ray
    assert json.loads(cli("status", first, "-o", "json"))["status"] == "STOPPED"
    assert [r["id"] for r in listed()] == [second]

    cli("queue", "release", queue)
    waited = rtjob("wait", second, "--timeout", "180", env=env, cwd=project, timeout=240)
    assert waited.returncode == 0, (waited.stdout[-2000:], waited.stderr[-3000:])
    assert wait_for(ended(api, second), 60, "the run to end") == "SUCCEEDED"
    assert api.job(first) is None  # the cancelled run never reached the cluster
    assert json.loads(cli("status", second, "-o", "json"))["status"] == "SUCCEEDED"
