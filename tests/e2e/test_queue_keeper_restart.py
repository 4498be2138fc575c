"""A queued pipeline's supervisor starts its queue's keeper again when the keeper died while a step waits (issue
44: "the next command that carries starts a dead one"; with every client gone the pipeline's supervisor is that
carrier). On the session's embedded cluster, folder storage, through the CLI and Ray's Jobs API.

Real time, no knob: the dead keeper's lease lapses after its 30 s time-to-live and the supervisor looks for the
keeper every 30 s, so the step waits up to about a minute. Nothing here carries the queue meanwhile: `rtjob queue`
and `status` only read, `queue release` only writes its intent, and `rtjob wait` (which would start the keeper
itself) is never run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import new_id, rtjob
from support.project import write_files
from support.ray_jobs import JobsAPI, ended, wait_for

pytestmark = pytest.mark.cluster


def test_a_pipelines_supervisor_starts_its_queues_dead_keeper_again(cluster_env, tmp_path: Path) -> None:
    project, queue = tmp_path / "project", new_id("keepq").replace("-", "")[:20]
    write_files(project, {
        "pyproject.toml": f'[tool.rtjob]\nstorage = "{tmp_path / "runs"}"\n\n[tool.rtjob.queues.{queue}]\nmax_running = 1\n',
        "jobs/two.yaml": ("name: two\nsteps:\n  - name: one\n    entrypoint: python -c \"print('step one')\"\n"
                          "  - name: two\n    entrypoint: python -c \"print('step two')\"\n"),
    })
    env, api = dict(cluster_env), JobsAPI(cluster_env)
    first, second = f"rtjob-keeper-{queue}-1", f"rtjob-keeper-{queue}-2"

    def cli(*args: str) -> str:
        done = rtjob(*args, env=env, cwd=project, timeout=240)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        return done.stdout

    def listed() -> list[tuple[str, str, int | None]]:
        return [(r["id"], r["status"], r["position"]) for r in json.loads(cli("queue", queue, "-o", "json"))]

    pipe = new_id("qkeep")
    try:
        cli("queue", "hold", queue)
        cli("submit", "two", "--queue", queue, "--submission-id", pipe, "--no-wait")
        wait_for(lambda: listed() == [(f"{pipe}-one", "QUEUED", 1)], 120, "the first step in the queue")
        cli("queue", "release", queue)
        wait_for(lambda: api.job(f"{pipe}-one") is not None, 120, "the first step admitted")
        cli("queue", "hold", queue)  # so the second step, enqueued when the first has ended, waits
        assert wait_for(ended(api, f"{pipe}-one"), 120, "the first step to end") == "SUCCEEDED"
        wait_for(lambda: listed() == [(f"{pipe}-two", "QUEUED", 1)], 120, "the second step in the queue")

        api.stop(first)  # the keeper dies while the step waits; its lease runs out in 30 s
        cli("queue", "release", queue)  # written, and folded by no one until a keeper runs again
        assert api.job(second) is None
        assert wait_for(ended(api, f"{pipe}-two"), 240, "the supervisor to start a keeper that admits the step") \
            == "SUCCEEDED"
        assert api.status(second) not in (None, "SUCCEEDED", "FAILED", "STOPPED"), "the new keeper keeps the queue"
        assert f"its queue's keeper was not running: started {second}" in api.logs(f"{pipe}-supervisor")
        wait_for(lambda: json.loads(cli("status", pipe, "-o", "json"))["status"] == "SUCCEEDED", 120,
                 "the pipeline to end SUCCEEDED")
    finally:
        for job in (second, first, f"{pipe}-supervisor"):
            if api.status(job) not in (None, "SUCCEEDED", "FAILED", "STOPPED"):
                api.stop(job)
