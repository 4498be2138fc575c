"""`rtjob submit --queue` for real, through the CLI on the session's embedded cluster (folder storage): two runs
submitted --no-wait to a held queue are QUEUED in order with their positions; `rtjob stop` of one cancels it and it
never reaches Ray; once released, the other is admitted and runs with no client alive, and `rtjob wait` follows it
to SUCCEEDED. Observed through the CLI's JSON and Ray's Jobs API."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from support.cli import new_id, popen_rtjob, rtjob
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


def test_a_queued_pipelines_next_step_is_enqueued_at_its_turn_ahead_of_later_arrivals(cluster_env,
                                                                                      tmp_path: Path) -> None:
    """Its supervisor enqueues each step when the one before it ended, with the pipeline's priority and its first
    enqueue time: a run submitted after the pipeline (same priority) waits behind the pipeline's second step."""
    project, queue = tmp_path / "project", new_id("pipeq").replace("-", "")[:20]
    write_files(project, {
        "pyproject.toml": f'[tool.rtjob]\nstorage = "{tmp_path / "runs"}"\n\n[tool.rtjob.queues.{queue}]\nmax_running = 1\n',
        "jobs/hello.yaml": "name: hello\nentrypoint: python -c \"print('hello after the pipeline')\"\n",
        "jobs/two.yaml": ("name: two\nsteps:\n  - name: one\n    entrypoint: python -c \"print('step one')\"\n"
                          "  - name: two\n    entrypoint: python -c \"print('step two')\"\n"),
    })
    env, api = dict(cluster_env), JobsAPI(cluster_env)

    def cli(*args: str) -> str:
        done = rtjob(*args, env=env, cwd=project, timeout=240)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        return done.stdout

    def listed() -> list[tuple[str, str, int | None, int]]:
        return [(r["id"], r["status"], r["position"], r["priority"]) for r in json.loads(cli("queue", queue, "-o", "json"))]

    cli("queue", "hold", queue)
    pipe, later = new_id("qpipe"), new_id("qlater")
    cli("submit", "two", "--queue", queue, "--priority", "2", "--submission-id", pipe, "--no-wait")
    cli("submit", "hello", "--queue", queue, "--priority", "2", "--submission-id", later, "--no-wait")
    # The first step waits in the queue (its supervisor enqueued it), the later run behind it; the second step is
    # not in the queue yet: it is enqueued when the first has ended.
    wait_for(lambda: listed() == [(f"{pipe}-one", "QUEUED", 1, 2), (later, "QUEUED", 2, 2)], 120,
             "the pipeline's first step and the later run, in that order")
    assert json.loads(cli("status", f"{pipe}-one", "-o", "json"))["status"] == "QUEUED"

    cli("queue", "release", queue)
    wait_for(lambda: api.job(f"{pipe}-one") is not None, 120, "the first step admitted")
    cli("queue", "hold", queue)  # max_running 1: the later run cannot be admitted before the hold either
    assert wait_for(ended(api, f"{pipe}-one"), 120, "the first step to end") == "SUCCEEDED"
    wait_for(lambda: listed() == [(f"{pipe}-two", "QUEUED", 1, 2), (later, "QUEUED", 2, 2)], 120,
             "the second step enqueued ahead of the later run (the pipeline's first enqueue time)")
    assert api.job(later) is None
    assert json.loads(cli("status", f"{pipe}-two", "-o", "json"))["status"] == "QUEUED"

    # `wait` follows the pipeline through its waiting step (a record this machine's ledger remembered QUEUED) to
    # its end once the queue is released.
    follower, told = popen_rtjob("wait", pipe, "-o", "json", "--timeout", "180", env=env, cwd=project), []
    reader = threading.Thread(target=lambda: [told.append(line) for line in follower.stderr or ()], daemon=True)
    reader.start()
    wait_for(lambda: any(f"{pipe}-two: QUEUED" in line for line in told), 120, "`wait` to see the step waiting")
    cli("queue", "release", queue)
    assert follower.wait(timeout=240) == 0, "".join(told)[-3000:]
    reader.join(30)
    assert [s["status"] for s in json.loads(follower.stdout.read())["steps"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert wait_for(ended(api, later), 120, "the later run to end") == "SUCCEEDED"
    assert api.job(f"{pipe}-two")["end_time"] <= api.job(later)["start_time"]  # max_running 1: one after the other

    # A stop of a pipeline whose step waits in the queue cancels the step there: it never reaches Ray.
    cli("queue", "hold", queue)
    stopped = new_id("qstop")
    cli("submit", "two", "--queue", queue, "--submission-id", stopped, "--no-wait")
    wait_for(lambda: [r[0] for r in listed()] == [f"{stopped}-one"], 120, "its first step queued")
    cli("stop", stopped)
    wait_for(lambda: json.loads(cli("status", stopped, "-o", "json"))["status"] == "STOPPED", 120,
             "the pipeline stopped")
    wait_for(lambda: listed() == [], 60, "its step cancelled in the queue")
    assert json.loads(cli("status", f"{stopped}-one", "-o", "json"))["status"] == "STOPPED"
    cli("queue", "release", queue)
    assert api.job(f"{stopped}-one") is None and api.job(f"{stopped}-two") is None
