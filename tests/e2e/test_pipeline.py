"""Pipelines on the real embedded cluster: steps run one after another, each reading the folder the step before it
wrote; --no-wait leaves every step to the pipeline's supervisor on the cluster; a failed step stops the pipeline with its exit code
and --from reruns from it reusing the earlier steps' runs; status and pull of the pipeline id cover every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import shared_runs
from support.cli import new_id, rtjob

pytestmark = pytest.mark.cluster

PIPELINE = shared_runs.RELAY


def ok(proc) -> str:
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


def _relay(storage_uri: str) -> str:
    return (Path(storage_uri) / "relay.txt").read_text()


def test_steps_hand_their_folders_down_and_no_wait_leaves_them_to_the_supervisor(cluster_env, tmp_path):
    relay = shared_runs.relay(cluster_env)  # `submit --no-wait`, then `wait` (test_ui_live_cluster.py shows its page)
    pid = relay.pid
    first = json.loads(ok(relay.submitted))
    # Quiet: rtjob's own line for the upload, none of Ray's client INFO (packaging.py, "already exists").
    assert "uploading working dir" in relay.submitted.stderr, relay.submitted.stderr
    assert "packaging.py" not in relay.submitted.stderr and "INFO" not in relay.submitted.stderr, relay.submitted.stderr
    assert first["id"] == pid and [s["run_id"] for s in first["steps"]] == [f"{pid}-{n}" for n in
                                                                           ("first", "second", "third")]
    # The client submitted nothing: the pipeline's supervisor on the cluster runs every step; wait follows them.
    done = json.loads(ok(relay.waited))
    assert done["status"] == "SUCCEEDED" and [s["status"] for s in done["steps"]] == ["SUCCEEDED"] * 3
    again = rtjob("submit", PIPELINE, "--submission-id", pid, "-o", "json", env=cluster_env, timeout=300)
    assert json.loads(ok(again))["status"] == "SUCCEEDED" and "already SUCCEEDED" in again.stderr
    outputs = json.loads(ok(rtjob("status", pid, "-o", "json", env=cluster_env)))["steps"]
    assert _relay(outputs[2]["storage_uri"]) == "first,second,third"

    status = json.loads(ok(rtjob("status", pid, "-o", "json", env=cluster_env)))
    assert status["status"] == "SUCCEEDED" and [s["status"] for s in status["steps"]] == ["SUCCEEDED"] * 3
    assert json.loads(ok(rtjob("wait", pid, "-o", "json", env=cluster_env)))["status"] == "SUCCEEDED"
    logs = ok(rtjob("logs", pid, env=cluster_env))
    assert logs.index("== step first") < logs.index("step first wrote first") < logs.index("== step second")
    assert "step third wrote first,second,third" in logs
    # The user's view of a log: the script's output, not Ray's wrapper or rtjob's own lines (--raw has them).
    for internal in ("Running entrypoint for job", "rtjob.runside.companion", "Runtime env is setting up", "rtjob-event:"):
        assert internal not in logs, (internal, logs)
    raw = ok(rtjob("logs", pid, "--raw", env=cluster_env))
    assert "Running entrypoint for job" in raw and "step third wrote first,second,third" in raw
    pulled = json.loads(ok(rtjob("pull", pid, "--to", str(tmp_path / "p"), "-o", "json", env=cluster_env)))
    assert [p["step"] for p in pulled] == ["first", "second", "third"]
    assert (tmp_path / "p" / "second" / "relay.txt").read_text() == "first,second"
    listed = {r["id"]: r for r in json.loads(ok(rtjob("runs", "--job", "relay", "-o", "json", env=cluster_env)))}
    assert listed[pid]["status"] == "SUCCEEDED"


def test_a_failed_step_stops_the_pipeline_and_from_reuses_the_steps_before_it(cluster_env):
    failed_id, fixed_id = new_id("relayf"), new_id("relayr")
    failed = rtjob("submit", PIPELINE, "--submission-id", failed_id, "--set", "second.args.fail=true",
                   env=cluster_env, timeout=300)
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert f"pipeline {failed_id} stopped at step second (FAILED)" in failed.stderr
    assert f"--from second {failed_id}" in failed.stderr
    status = json.loads(ok(rtjob("status", failed_id, "-o", "json", env=cluster_env)))
    assert status["status"] == "FAILED"
    assert [s["status"] for s in status["steps"]] == ["SUCCEEDED", "FAILED", None]

    fixed = rtjob("submit", PIPELINE, "--from", "second", failed_id, "--submission-id", fixed_id, "-o", "json",
                  env=cluster_env, timeout=300)
    done = json.loads(ok(fixed))
    assert done["status"] == "SUCCEEDED"
    assert [(s["run_id"], s["reused_from"]) for s in done["steps"]] == [
        (f"{failed_id}-first", failed_id), (f"{fixed_id}-second", None), (f"{fixed_id}-third", None)]
    assert _relay(done["steps"][2]["storage_uri"]) == "first,second,third"
