"""Runs that outlive their cluster, end to end: a run on a private embedded cluster with S3 storage (moto on
loopback), a pipeline run, another run still running, then `rtjob local down`. Afterwards `runs`, `show`, `status`,
`logs`, `results`, `pull` and `rerun --dry-run` work from the ledger and the bucket (a pipeline's `status`, `wait`,
`show` and `logs` too); a second client with an empty ledger finds the team's runs from the bucket alone (every view of its, the
UI's too, says one verdict of the pipeline), and while a run runs, `runs`, `runs --storage` and the UI's runs list say RUNNING. Real Ray, real S3 protocol, nothing mocked.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.agree import views
from support.browser import ui_server
from support.cli import base_env, new_id, plant, rtjob, wait_for_status
from support.ray_jobs import wait_for
from support.s3_server import S3Server, bucket_fixture

pytestmark = pytest.mark.cluster

BUCKET = "team-runs"
JOB = "tests/support/jobs/checkpoints.yaml"
SLOW = "tests/support/jobs/count.yaml"
RELAY = "tests/support/jobs/relay.yaml"  # three tiny steps


s3 = bucket_fixture(BUCKET)


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rtjob-hist-", dir="/tmp"))
    try:
        yield path
    finally:
        rtjob("local", "down", env=base_env(path), timeout=180)  # the test's own cluster, stopped by pid
        shutil.rmtree(path, ignore_errors=True)


def ok(proc) -> str:
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


def test_runs_outlive_their_cluster_here_and_on_a_fresh_client(s3: S3Server, home: Path, tmp_path: Path) -> None:
    token = plant("wb-" + new_id("tok").replace("-", ""))
    env = {**base_env(home), **s3.env()}
    storage = f"s3://{BUCKET}/team"
    done_id, cut_id, pipe_id = new_id("hist"), new_id("cut"), new_id("relay")

    # A run that ends (followed to its end: its record and log archived), one left running (--no-wait).
    submit = rtjob("submit", JOB, "--storage", storage, "--forward-aws-credentials", "--submission-id", done_id,
                   "--env", f"WANDB_API_KEY={token}", "-o", "json", env=env, timeout=600)
    assert json.loads(ok(submit))["status"] == "SUCCEEDED"
    # A pipeline run followed to its end: its history must outlive the cluster too.
    relayed = rtjob("submit", RELAY, "--storage", storage, "--forward-aws-credentials", "--submission-id", pipe_id,
                    "-o", "json", env=env, timeout=600)
    assert json.loads(ok(relayed))["status"] == "SUCCEEDED"
    ok(rtjob("submit", SLOW, "--storage", storage, "--submission-id", cut_id, "--no-wait",
             "--set", "args.lines=100000", "--set", "args.interval=0.05", env=env, timeout=300))
    wait_for_status(env, cut_id, {"RUNNING"}, timeout=120)
    # RUNNING is the job's start: the companion seeds the run's folder before the script prints its first line.
    wait_for(lambda: " of 100000" in rtjob("logs", cut_id, "--tail", "5", env=env).stdout, timeout=120,
             what=f"{cut_id}'s first lines")
    # While it runs, every listing says RUNNING: the team's index (its companion's start wrote an entry) from a
    # teammate's fresh HOME, and this machine's ledger.
    teammate = {**base_env(tmp_path / "teammate-home"), **s3.env()}
    running = {r["id"]: r for r in json.loads(ok(rtjob("runs", "--storage", storage, "-o", "json", env=teammate)))}
    assert running[cut_id]["status"] == "RUNNING", running[cut_id]
    assert {r["id"]: r for r in json.loads(ok(rtjob("runs", "-o", "json", env=env)))}[cut_id]["status"] == "RUNNING"
    # ... and the UI's runs list: a real `rtjob ui` over the bucket from the teammate's HOME (its JSON, as the page)
    with ui_server(teammate, "--storage", storage, log=tmp_path / "ui.log") as url:
        answer = urllib.request.urlopen(url + "api/runs", timeout=60).read()
    shown = {r["id"]: r for r in json.loads(answer)["runs"]}
    assert shown[cut_id]["status"] == "RUNNING", shown[cut_id]
    record = json.loads(s3.client().get_object(Bucket=BUCKET, Key=f"team/checkpoints/{done_id}/rtjob-run.json")
                        ["Body"].read())
    assert record["status"] == "SUCCEEDED" and record["archived"] is True
    assert record["git"] and len(record["git"]["commit"]) == 40  # the repository's own commit
    assert record["spec"]["overrides"]["env"] == ["WANDB_API_KEY=<rtjob:secret>"]

    # Node folders (s3 storage): the running run's, and one planted as an attempt killed with its node would leave
    # it; another cluster's run's folder is not this cluster's to remove.
    from rtjob.storage.node_dirs import run_folder

    assert Path(run_folder(cut_id), "run").is_dir()
    left, other = Path(run_folder(done_id)), Path(run_folder(new_id("other")))
    for folder in (left, other):
        (folder / "run").mkdir(parents=True, mode=0o700)
        (folder / "run" / "checkpoint.json").write_text("{}")
    down = rtjob("local", "down", env=env, timeout=180)
    assert "archived 1 run(s)" in ok(down) + down.stderr
    assert not Path(run_folder(cut_id)).exists() and not left.exists()
    assert (other / "run" / "checkpoint.json").exists()
    shutil.rmtree(other)

    # This machine, the cluster gone: the ledger and the bucket still answer.
    listed = {r["id"]: r for r in json.loads(ok(rtjob("runs", "-o", "json", env=env)))}
    assert listed[done_id]["status"] == "SUCCEEDED" and listed[cut_id]["status"] == "STOPPED"
    assert listed[cut_id]["archived"] is True
    status = rtjob("status", done_id, "-o", "json", env=env)
    assert json.loads(ok(status))["status"] == "SUCCEEDED" and "from the run record" in status.stderr
    assert "training done" in ok(rtjob("logs", done_id, env=env))
    assert "line 1 of 100000" in ok(rtjob("logs", cut_id, "--tail", "100000", env=env))
    shown = json.loads(ok(rtjob("show", done_id, "-o", "json", env=env)))
    assert [c["name"] for c in shown["checkpoints"]] == ["checkpoint_epoch_0001", "checkpoint_epoch_0002"]
    assert shown["logs"] and shown["spec_hash"] and shown["request"]["submit_job"]["submission_id"] == done_id
    assert shown["request"]["submit_job"]["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "****"
    rows = json.loads(ok(rtjob("results", done_id, "-o", "json", env=env)))
    assert [r["epoch"] for r in rows[0]["history"]] == [1, 2]
    pulled = json.loads(ok(rtjob("pull", done_id, "--to", str(tmp_path / "pulled"), "-o", "json", env=env)))
    assert pulled["checkpoints"] == ["checkpoint_epoch_0002"]

    pipeline_after_its_cluster(pipe_id, env)

    # rerun: the same request apart from the run id; the secret found again in this environment, never stored.
    refused = rtjob("rerun", done_id, "--dry-run", "-o", "json", env=env)
    assert refused.returncode == 2 and "WANDB_API_KEY" in refused.stderr, refused.stderr
    again = rtjob("rerun", done_id, "--dry-run", "-o", "json", "--submission-id", f"{done_id}-again",
                  env={**env, "WANDB_API_KEY": token})
    rendered = json.loads(ok(again))
    assert "differs" not in again.stderr, again.stderr
    expected = json.loads(json.dumps(shown["request"]).replace(done_id, f"{done_id}-again"))
    # The GCS address rtjob gave the run (RAY_ADDRESS) is where it went: that cluster is gone, a new one has new ports.
    sent = expected["submit_job"]["runtime_env"]["env_vars"].pop("RAY_ADDRESS")
    assert sent.rsplit(":", 1)[1].isdigit() and "RAY_ADDRESS" not in rendered["submit_job"]["runtime_env"]["env_vars"]
    assert rendered["submit_job"] == expected["submit_job"]

    # A teammate with only the bucket: an empty ledger, no cluster.
    fresh_home = tmp_path / "fresh-home"
    fresh = {**base_env(fresh_home), **s3.env()}
    team = {r["id"]: r for r in json.loads(ok(rtjob("runs", "--storage", storage, "-o", "json", env=fresh)))}
    assert {done_id, cut_id} <= set(team) and team[done_id]["status"] == "SUCCEEDED"
    assert "training done" in ok(rtjob("logs", done_id, env=fresh))
    assert json.loads(ok(rtjob("results", done_id, "-o", "json", env=fresh)))[0]["history"][-1]["epoch"] == 2
    assert pipe_id in team
    pipeline_after_its_cluster(pipe_id, fresh)
    # ... and every view of the teammate's (`runs --storage`, `status`, `show`, the UI's list, page and API): one
    # verdict of the pipeline, its start, end and duration its steps'; no cluster of the teammate's blamed.
    seen = views(pipe_id, storage, fresh)
    agreed = seen.agree()
    assert (agreed["status"], agreed["reason"], agreed["attempts"]) == ("SUCCEEDED", "completed", 1), agreed
    assert agreed["duration_s"] and agreed["end_time"], agreed
    assert "embedded" not in seen.status_stderr and "not running" not in seen.status_stderr, seen.status_stderr


def pipeline_after_its_cluster(pipe_id: str, env: dict[str, str]) -> None:
    """A pipeline run whose cluster is gone: `status`, `wait`, `show` and `logs` answer from its records."""
    status = json.loads(ok(rtjob("status", pipe_id, "-o", "json", env=env)))
    assert status["status"] == "SUCCEEDED", status
    assert [(s["name"], s["status"]) for s in status["steps"]] == [("first", "SUCCEEDED"), ("second", "SUCCEEDED"),
                                                                  ("third", "SUCCEEDED")], status
    waited = rtjob("wait", pipe_id, env=env)
    assert waited.returncode == 0 and f"pipeline {pipe_id} SUCCEEDED" in waited.stderr, waited.stderr
    shown = ok(rtjob("show", pipe_id, env=env))
    assert "steps:       first SUCCEEDED -> second SUCCEEDED -> third SUCCEEDED" in shown, shown
    assert "backend:     local" in shown and "(None)" not in shown and "not archived" not in shown, shown
    logs = ok(rtjob("logs", pipe_id, env=env))
    assert "step third wrote first,second,third" in logs and "(no log" not in logs, logs
