"""A plain script's run mirrored to a REAL MLflow tracking server on loopback (issue 46): `tracking: {mlflow: ...}`
in the job, no change to the script (it prints rtjob's step rows and writes its epoch history, metrics.json, in
RTJOB_RUN_DIR), the embedded cluster. The server is stopped in the middle of the run and started again: the run goes
on, and the MLflow run still gets every step, both epochs, the companion's system rows as MLflow's system metrics,
the job's args as params (the secret one left out), rtjob's and MLflow's tags (the project's git commit), FINISHED
at the end; `rtjob status` names the MLflow run. A run that fails once and is retried (max_retries: 1) is still one
MLflow run: RUNNING again, `rtjob.attempt` 2, its steps going on, FINISHED. One server and the session's cluster.

The server comes from .venv-mlflow (`make mlflow-server`, which `make test` builds): without it the test is
skipped here and fails in CI."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import PLANTED, new_id, rtjob, wait_for_status
from support.mlflow_server import MlflowServer, available

pytestmark = pytest.mark.cluster

API_KEY = "sk-tracking0secret0value0123456789"
PLANTED.add(API_KEY)
EXPERIMENT = "rtjob-e2e"

SCRIPT = '''
import json, os, sys, time
gate = sys.argv[sys.argv.index("--gate") + 1]
def steps(first, last):
    for i in range(first, last):
        print("rtjob-event: step_row " + json.dumps({"step": i, "time": time.time(), "loss": 1.0 / (i + 1)}),
              flush=True)
        time.sleep(0.05)
def wait_for(name):
    while not os.path.exists(os.path.join(gate, name)):
        time.sleep(0.2)
def epochs(rows):  # the history as rtjob's entrypoints keep it: the whole list, rewritten at each epoch's end
    path = os.path.join(os.environ["RTJOB_RUN_DIR"], "metrics.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rows, f)
    os.replace(path + ".tmp", path)
steps(0, 10)
epochs([{"epoch": 1, "val_loss": 0.5, "precision": "fp32"}])
wait_for("down")  # the test stopped MLflow
steps(10, 20)
time.sleep(2)  # a flush or two with MLflow down
wait_for("up")  # the test started it again
steps(20, 30)
epochs([{"epoch": 1, "val_loss": 0.5, "precision": "fp32"}, {"epoch": 2, "val_loss": 0.25, "precision": "fp32"}])
'''

RETRIED = '''
import json, os, signal, sys, time
failed = os.path.join(sys.argv[sys.argv.index("--gate") + 1], "failed")
first = not os.path.exists(failed)
for i in range(0, 10) if first else range(10, 20):
    print("rtjob-event: step_row " + json.dumps({"step": i, "time": time.time(), "loss": 1.0 / (i + 1)}), flush=True)
if first:
    open(failed, "w").close()
    os.kill(os.getpid(), signal.SIGKILL)  # a lost driver (the OOM killer's way): rtjob retries the run
'''

TRACKED = """
env_vars:
  RTJOB_COMPANION_INTERVAL_S: "1"
tracking:
  mlflow:
    tracking_uri: {uri}
    experiment: {experiment}
"""  # both jobs': a flush a second, the one server
JOB = """
name: tracked
entrypoint: python tracked.py
working_dir: .
requirements: []
args:
  lr: 0.1
  api_key: {api_key}
  gate: {gate}
""" + TRACKED
RETRIED_JOB = """
name: retried
entrypoint: python retried.py
working_dir: .
requirements: []
max_retries: 1
args:
  gate: {gate}
""" + TRACKED


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    if not available():
        if os.environ.get("CI"):
            pytest.fail(".venv-mlflow is missing: `make mlflow-server` builds it (make test does)")
        pytest.skip(".venv-mlflow is missing: `make mlflow-server` builds it")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout}s: {what}")


def _run_of(mlflow: MlflowServer, run_id: str) -> dict[str, Any] | None:
    runs = [r for r in mlflow.runs(EXPERIMENT)
            if any(t["key"] == "rtjob.run_id" and t["value"] == run_id for t in r["data"].get("tags", []))]
    assert len(runs) <= 1, runs  # one MLflow run per rtjob run
    return runs[0] if runs else None


def test_a_plain_scripts_run_is_one_mlflow_run_with_every_step_through_an_outage(cluster_env, mlflow, tmp_path):
    gate, project, job = _project(tmp_path, "tracked", SCRIPT, JOB, mlflow.uri, api_key=API_KEY)
    commit = _git_commit(project)
    run_id = new_id("tracked")
    proc = rtjob("submit", str(job), "--submission-id", run_id, "--no-wait", env=cluster_env, cwd=project)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr

    first = _until(lambda: (run := _run_of(mlflow, run_id)) and len(mlflow.history(run["info"]["run_id"], "loss"))
                   >= 10 and run, 90, "the first 10 steps in MLflow")
    mlflow_run_id = first["info"]["run_id"]
    mlflow.stop()
    (gate / "down").touch()
    time.sleep(4)  # steps 10-19 come while MLflow is down: the run goes on
    mlflow.start()
    (gate / "up").touch()
    assert wait_for_status(cluster_env, run_id, {"SUCCEEDED", "FAILED"}, timeout=90) == "SUCCEEDED"

    ended = _until(lambda: (run := _run_of(mlflow, run_id)) and run["info"]["status"] == "FINISHED" and run, 20,
                   "the MLflow run FINISHED")
    assert ended["info"]["run_id"] == mlflow_run_id
    steps = sorted(m["step"] for m in mlflow.history(mlflow_run_id, "loss"))
    assert steps == list(range(30)), steps  # every step, once, the outage's too
    params = {p["key"]: p["value"] for p in ended["data"].get("params", [])}
    assert params["lr"] == "0.1" and params["gate"] == str(gate) and "api_key" not in params
    assert API_KEY not in str(ended)
    tags = {t["key"]: t["value"] for t in ended["data"]["tags"]}
    assert tags["rtjob.job"] == "tracked" and tags["rtjob.status_command"] == f"rtjob status {run_id}"
    assert tags["mlflow.source.git.commit"] == commit and tags["mlflow.source.type"] == "JOB"
    assert tags["rtjob.git_dirty"] == "false" and tags["mlflow.runName"] == run_id
    import getpass  # rtjob's own tags: who submitted it where, and which attempt (a first run's is 1)

    assert (tags["rtjob.user"], tags["mlflow.user"]) == (getpass.getuser(),) * 2 and getpass.getuser()
    assert tags["rtjob.backend"] == "local" and tags["rtjob.attempt"] == "1", tags
    epochs = sorted((m["step"], m["value"]) for m in mlflow.history(mlflow_run_id, "val_loss"))
    assert epochs == [(1, 0.5), (2, 0.25)], epochs  # each epoch once, by its epoch; "precision" is no number
    latest = {m["key"]: m["value"] for m in ended["data"]["metrics"]}
    cpu = [k for k in latest if re.fullmatch(r"system/[^/]+/cpu_utilization_percentage", k)]
    assert cpu and 0 <= latest[cpu[0]] <= 100, sorted(latest)  # the companion's node, as MLflow names it
    assert any(k.endswith("/system_memory_usage_megabytes") and latest[k] > 0 for k in latest), sorted(latest)

    status = _until(lambda: (out := rtjob("status", run_id, env=cluster_env, cwd=project).stdout)
                    and mlflow_run_id in out and out, 30, "status names the MLflow run")
    assert f"mlflow:      {mlflow.uri}/#/experiments/" in status and "not sent" not in status
    assert API_KEY not in status

    resent = rtjob("track", "resend", run_id, env=cluster_env, cwd=project)  # the rows from the run's storage
    assert resent.returncode == 0, resent.stderr
    had = re.search(r"0 metric value\(s\) sent, (\d+) MLflow already had", resent.stderr)
    assert had and int(had[1]) >= 30 + 2 + 3, resent.stderr  # the steps, the epochs, a system row or more
    assert sorted(m["step"] for m in mlflow.history(mlflow_run_id, "loss")) == list(range(30))  # none twice
    assert len(mlflow.history(mlflow_run_id, "val_loss")) == 2


def test_a_retried_run_is_still_one_mlflow_run_its_attempts_and_steps_going_on(cluster_env, mlflow, tmp_path):
    _gate, project, job = _project(tmp_path, "retried", RETRIED, RETRIED_JOB, mlflow.uri)
    run_id = new_id("retried")
    proc = rtjob("submit", str(job), "--submission-id", run_id, env=cluster_env, cwd=project, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert f"{run_id}-retry1 SUCCEEDED" in proc.stderr, proc.stderr

    ended = _until(lambda: (run := _run_of(mlflow, run_id)) and run["info"]["status"] == "FINISHED" and run, 20,
                   "the one MLflow run FINISHED after the retry")
    tags = {t["key"]: t["value"] for t in ended["data"]["tags"]}
    assert tags["rtjob.attempt"] == "2" and tags["rtjob.run_id"] == run_id
    steps = sorted(m["step"] for m in mlflow.history(ended["info"]["run_id"], "loss"))
    assert steps == list(range(20)), steps  # both attempts' steps, the first's once though read again


def _project(tmp_path: Path, name: str, script: str, job: str, uri: str, **values: str) -> tuple[Path, Path, Path]:
    """(the gate folder the script waits on, the project, its job file NAME.yaml running NAME.py)."""
    gate, project = tmp_path / "gate", tmp_path / "proj"
    gate.mkdir()
    project.mkdir()
    (project / f"{name}.py").write_text(script)
    (project / f"{name}.yaml").write_text(job.format(gate=gate, uri=uri, experiment=EXPERIMENT, **values))
    return gate, project, project / f"{name}.yaml"


def _git_commit(project: Any) -> str:
    """The project as a git checkout with one commit (its job file and script): the commit."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com",
                               *args], check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "the tracked job")
    return git("rev-parse", "HEAD")
