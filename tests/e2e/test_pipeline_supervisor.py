"""Pipelines carried on the cluster by their supervisor (<pipeline id>-supervisor, a Ray job), for real on the
session's 2-node embedded cluster with S3 storage (moto): a `--no-wait` pipeline whose first step's driver is
SIGKILLed after its first checkpoint ends SUCCEEDED with no rtjob process alive (the step retried once, resumed at
the next epoch, the next step ran once on its output, one notification); a client following as well changes
nothing; a stop ends it with nothing further run; a supervisor killed between steps is reported by `rtjob
status` and replaced by `rtjob status --repair`, exactly once; a step's secret is resolved again by its retry.
Observed through the Jobs API and storage until everything is asserted."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import new_id, plant, popen_rtjob, rtjob
from support.ray_jobs import JobsAPI, concurrent_status, ended, supervisor_pids, wait_for
from support.s3_server import S3Server, bucket_fixture
from support.webhook import Receiver

pytestmark = pytest.mark.cluster

BUCKET = "rtjob-pipelines"
s3 = bucket_fixture(BUCKET)
PIPELINE = "tests/support/jobs/epochs.yaml"
FIRST_TOKEN, ROTATED_TOKEN = plant("pipeline-step-token-7a6b5c"), plant("pipeline-step-token-rotated-4d3e2f")


def submit_args(pid: str) -> list[str]:
    return ["submit", PIPELINE, "--storage", f"s3://{BUCKET}/runs", "--forward-aws-credentials", "--submission-id",
            pid]


def setting(cluster_env: dict[str, str], s3: S3Server, receiver: Receiver) -> dict[str, str]:
    return {**cluster_env, **s3.env(), "EPOCHS_HOOK": receiver.url("/hook")}


def keys(s3: S3Server, prefix: str) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def record(s3: S3Server, job: str, run_id: str) -> dict:
    got = s3.client().get_object(Bucket=BUCKET, Key=f"runs/{job}/{run_id}/rtjob-run.json")
    return json.loads(got["Body"].read())


def kill_after_first_checkpoint(api: JobsAPI, s3: S3Server, train: str,
                                before_kill: Callable[[], object] = lambda: None) -> None:
    """SIGKILL the train step's entrypoint once epoch 1's checkpoint is complete in storage (epoch 2 takes 2 s);
    ``before_kill`` runs just before (the attempt killed has started by then)."""
    wait_for(lambda: f"runs/epochs-train/{train}/checkpoint_epoch_0001/state.json" in keys(s3, "runs/epochs-train/"),
             180, "epoch 1's checkpoint")
    before_kill()
    assert api.job(f"{train}-retry1") is None
    marker = f"RTJOB_RUN_NAME={train}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if entry.name.isdigit() and cmd.startswith("python epochs.py --epochs") \
                    and marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)


def assert_trained_once_then_used(api: JobsAPI, s3: S3Server, pid: str) -> None:
    train, use = f"{pid}-train", f"{pid}-use"
    assert api.status(train) == "FAILED" and api.status(f"{train}-retry1") == "SUCCEEDED"
    assert api.job(f"{train}-retry2") is None and api.status(use) == "SUCCEEDED" and api.job(f"{use}-retry1") is None
    first, retry = api.logs(train), api.logs(f"{train}-retry1")
    assert "starting at epoch 1" in first and "starting at epoch 2" in retry, (first[-2000:], retry[-2000:])
    trained = [line for line in (first + retry).splitlines() if line.startswith("epoch ") and "trained" in line]
    assert trained == ["epoch 1 trained", "epoch 2 trained", "epoch 3 trained"], trained
    got = s3.client().get_object(Bucket=BUCKET, Key=f"runs/epochs-use/{use}/consumed.txt")["Body"].read()
    assert got == b"1,2,3"  # read with open() from RTJOB_INPUT_DIR, synced down from the train step's folder
    used = keys(s3, f"runs/epochs-use/{use}/")
    assert f"runs/epochs-use/{use}/consumed.txt" in used and not any("checkpoint_epoch" in k for k in used), used
    assert "consumed epochs [1, 2, 3] from /" in api.logs(use)  # never uploaded back; a local path
    for job, step in (("epochs-train", train), ("epochs-use", use)):  # each step's record and whole log stored
        rec = record(s3, job, step)
        assert rec["status"] == "SUCCEEDED" and rec["logs"], rec
    pipeline = record(s3, "epochs", pid)
    assert pipeline["status"] == "SUCCEEDED" and pipeline["carried_by"] == "supervisor"
    assert [s["status"] for s in pipeline["steps"]] == ["SUCCEEDED", "SUCCEEDED"]


def test_a_no_wait_pipeline_runs_every_step_with_no_client_alive(cluster_env, s3: S3Server, receiver: Receiver,
                                                                  tmp_path: Path) -> None:
    """... and a step's `secrets:` entry is resolved again by each attempt (the file rotated before the kill: the
    retry sees the new value), its value in no job's info (issue 45)."""
    env = setting(cluster_env, s3, receiver)
    api = JobsAPI(env)
    pid = new_id("pipe")
    token = tmp_path / "token"  # a file:// secret on the (one machine's) nodes
    token.write_text(FIRST_TOKEN)
    start = time.monotonic()
    submit = rtjob(*submit_args(pid), "--no-wait", "-o", "json", "--set", f"train.secrets.EPOCHS_TOKEN=file://{token}",
                   env=env, timeout=240)
    assert submit.returncode == 0, submit.stderr[-3000:]
    print(f"submit --no-wait returned in {time.monotonic() - start:.1f} s")
    supervisor = api.job(f"{pid}-supervisor")
    assert supervisor is not None, submit.stderr[-3000:]
    assert supervisor["metadata"]["rtjob.role"] == "supervisor" and supervisor["metadata"]["rtjob.supervises"] == pid
    assert not supervisor.get("entrypoint_num_cpus")
    assert supervisor["runtime_env"]["working_dir"].startswith("gcs://")
    listed = json.loads(rtjob("list", "-o", "json", env=env).stdout)
    assert all(not r["id"].startswith(f"{pid}-supervisor") for r in listed)

    kill_after_first_checkpoint(api, s3, f"{pid}-train", lambda: token.write_text(ROTATED_TOKEN))
    assert wait_for(ended(api, f"{pid}-supervisor"), 300, "the pipeline's supervisor to end") == "SUCCEEDED", \
        api.logs(f"{pid}-supervisor")[-3000:]
    assert_trained_once_then_used(api, s3, pid)
    for attempt, value in ((f"{pid}-train", FIRST_TOKEN), (f"{pid}-train-retry1", ROTATED_TOKEN)):
        assert f"token {hashlib.sha256(value.encode()).hexdigest()[:16]}" in api.logs(attempt), api.logs(attempt)
    hooks = [json.loads(body) for path, _, body in receiver.got if path == "/hook"]
    assert [(h["run_id"], h["outcome"]) for h in hooks] == [(pid, "succeeded")], hooks
    # The forwarded secret key travelled sealed: neither the supervisor's, the steps' nor a retried step's job
    # info holds it (issue 45).
    held = json.dumps([api.job(job) for job in (f"{pid}-supervisor", f"{pid}-train", f"{pid}-train-retry1",
                                                f"{pid}-use")])
    assert f"{pid}-train-retry1" in held and s3.secret_key not in held, "a job's info holds the forwarded key"
    assert FIRST_TOKEN not in held and ROTATED_TOKEN not in held and f"file://{token}" in held  # references only

    waited = rtjob("wait", pid, "--timeout", "1m", "-o", "json", env=env, timeout=120)
    assert waited.returncode == 0 and json.loads(waited.stdout)["status"] == "SUCCEEDED", waited.stderr[-2000:]
    status = json.loads(rtjob("status", pid, "-o", "json", env=env).stdout)
    assert status["status"] == "SUCCEEDED" and [s["status"] for s in status["steps"]] == ["SUCCEEDED"] * 2
    assert status["supervisor"]["id"] == f"{pid}-supervisor" and status["supervisor"]["status"] == "SUCCEEDED"
    assert status["supervisor"]["last_seen"] and status["current_step"] is None


def test_a_followed_pipeline_still_has_one_retry_and_one_next_step(cluster_env, s3: S3Server,
                                                                   receiver: Receiver) -> None:
    env = setting(cluster_env, s3, receiver)
    api = JobsAPI(env)
    pid = new_id("pipef")
    follower = popen_rtjob(*submit_args(pid), "-o", "json", env=env)
    try:
        kill_after_first_checkpoint(api, s3, f"{pid}-train")
        out, err = follower.communicate(timeout=300)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0 and json.loads(out)["status"] == "SUCCEEDED", err[-3000:]
    assert wait_for(ended(api, f"{pid}-supervisor"), 120, "the supervisor to end") == "SUCCEEDED"
    assert_trained_once_then_used(api, s3, pid)
    assert "submitted" in api.logs(f"{pid}-supervisor")  # the supervisor submitted the steps; the client attached
    assert [json.loads(b)["run_id"] for p, _, b in receiver.got if p == "/hook"] == [pid]


def test_a_stopped_pipeline_runs_nothing_further(cluster_env, s3: S3Server, receiver: Receiver) -> None:
    """`rtjob stop PIPELINE_ID` during step 1: the step STOPPED, no retry, no step 2; the supervisor ends by itself
    and records the pipeline STOPPED. Then a stop between steps: no step 2."""
    env = setting(cluster_env, s3, receiver)
    api = JobsAPI(env)
    pid = new_id("pipes")
    train = f"{pid}-train"
    # step 1 trains far longer than the stop takes to reach it (however busy the machine): only the stop ends it
    assert rtjob(*submit_args(pid), "--no-wait", "--set", "train.args.epochs=90", env=env, timeout=240).returncode == 0
    wait_for(lambda: "epoch 1 trained" in (api.logs(train) if api.job(train) else ""), 180, "step 1 to train")
    stopped = rtjob("stop", pid, env=env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    # Its final state, as `stop` of a run prints one (the pipeline's, with its steps').
    assert f"rtjob: {pid}: STOPPED (steps: train STOPPED, use not run)" in stopped.stderr, stopped.stderr[-2000:]
    assert wait_for(ended(api, f"{pid}-supervisor"), 120, "the supervisor to end") == "SUCCEEDED"
    assert api.status(train) == "STOPPED" and api.job(f"{train}-retry1") is None and api.job(f"{pid}-use") is None
    pipeline = record(s3, "epochs", pid)
    assert pipeline["status"] == "STOPPED" and [s["status"] for s in pipeline["steps"]] == ["STOPPED", None]
    assert [json.loads(b)["outcome"] for p, _, b in receiver.got if p == "/hook"] == ["stopped"]

    # Between steps: step 1 SUCCEEDED while no supervisor lived (killed), then the stop; the supervisor the next
    # status --repair starts reads the marker before it would submit step 2, and ends the pipeline STOPPED.
    pid = new_id("pipeb")
    train = f"{pid}-train"
    assert rtjob(*submit_args(pid), "--no-wait", env=env, timeout=240).returncode == 0
    wait_for(lambda: api.job(train), 120, "the supervisor to submit step 1")
    pids = wait_for(lambda: supervisor_pids(pid), 60, "the supervisor's process")
    os.kill(pids[0], signal.SIGKILL)
    assert wait_for(ended(api, train), 180, "step 1 to end") == "SUCCEEDED"
    assert rtjob("stop", pid, env=env, timeout=120).returncode == 0
    assert rtjob("status", pid, "--repair", env=env, timeout=120).returncode == 0
    assert wait_for(ended(api, f"{pid}-supervisor-2"), 120, "the next supervisor to end") == "SUCCEEDED"
    assert api.job(f"{pid}-use") is None and record(s3, "epochs", pid)["status"] == "STOPPED"


def test_a_supervisor_killed_between_steps_is_replaced_by_status_repair_exactly_once(cluster_env, s3: S3Server,
                                                                                         receiver: Receiver) -> None:
    env = setting(cluster_env, s3, receiver)
    api = JobsAPI(env)
    pid = new_id("pipek")
    train, use, first, second = f"{pid}-train", f"{pid}-use", f"{pid}-supervisor", f"{pid}-supervisor-2"
    assert rtjob(*submit_args(pid), "--no-wait", env=env, timeout=240).returncode == 0
    wait_for(lambda: api.job(train), 120, "the supervisor to submit step 1")
    pids = wait_for(lambda: supervisor_pids(pid), 60, "the supervisor's process")
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    assert wait_for(ended(api, first), 60, "the supervisor's job to end") == "FAILED"
    assert wait_for(ended(api, train), 180, "step 1 to end") == "SUCCEEDED"
    assert api.job(use) is None  # nothing carries the pipeline now

    looked = rtjob("status", pid, env=env, timeout=120)  # looking starts nothing: it says what would
    assert looked.returncode == 0 and f"rtjob status {pid} --repair" in looked.stderr, looked.stderr
    assert api.job(second) is None
    answers = concurrent_status(pid, env, "--repair")
    try:
        assert wait_for(ended(api, second), 180, "the new supervisor to end") == "SUCCEEDED"
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {api.job(second)}\n{api.logs(second)[-3000:] if api.job(second) else ''}\n"
                             f"{answers}") from None
    assert api.status(use) == "SUCCEEDED" and api.job(f"{pid}-supervisor-3") is None
    assert f"submitted {use}" in api.logs(second) and record(s3, "epochs", pid)["status"] == "SUCCEEDED"
