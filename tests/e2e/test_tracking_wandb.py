"""The W&B mirror (issue 46) with W&B's own SDK in offline mode: the run-side companion, run as Ray runs an
entrypoint (``sh -c``, its output into a driver log file), in a Python that has `wandb` (.venv-wandb, `make
wandb-sdk`: a job's environment that brings it; rtjob never installs it), against a local storage folder, a plain
script printing step rows and writing its epoch history. Nothing is mocked: offline mode is W&B's own and needs no
server; what is not exercised is W&B's upload (its cloud cannot run here). The offline run's transaction log is read
back with W&B's own protobuf schema (support/wandb_offline.py): one run named by the rtjob run id, the job's args
as its config (the secret one left out), rtjob's tags, every step at its step, the epochs with their epoch, a
node's system row under nodes/NODE/, the exit; the run's record says where the offline run is. Without .venv-wandb the test is skipped here, fails in CI."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rtjob.runs.tracking_view import tracking_lines
from support import wandb_offline
from support.cli import REPO, plant
from support.cli import record as record_output

import rtjob_contract as contract

SECRET = plant("wandb-mirror-secret-0451")
SCRIPT = '''
import json, os, time
first = int(os.environ.get("FIRST_STEP", "0"))
for i in range(first, first + 12):
    print("rtjob-event: step_row " + json.dumps({"step": i, "time": time.time(), "loss": 1.0 / (i + 1)}), flush=True)
    if i % 12 == 2:  # a system row of another node, as a worker's sampler prints it (training/system_rows.py)
        print("rtjob-event: system_row " + json.dumps({"time": time.time(), "node": "worker_a", "cpu_percent": 42.0,
              "mem_used_mb": 512.0, "mem_total_mb": 2048.0, "gpus": []}), flush=True)
    if i % 12 in (5, 11):
        rows = [{"epoch": e, "val_loss": 0.5 / e} for e in range(1, 2 + i // 6)]
        path = os.path.join(os.environ["RTJOB_RUN_DIR"], "metrics.json")
        with open(path + ".tmp", "w") as f:
            json.dump(rows, f)
        os.replace(path + ".tmp", path)
    time.sleep(0.1)
'''


@pytest.fixture(scope="module")
def wandb_python() -> Path:
    if not wandb_offline.available():
        if os.environ.get("CI"):
            pytest.fail(".venv-wandb is missing: `make wandb-sdk` builds it (make test does)")
        pytest.skip(".venv-wandb is missing: `make wandb-sdk` builds it")
    return wandb_offline.PYTHON


def companion(python: Path, tmp_path: Path, **extra: str) -> str:
    """The companion as Ray runs it, in ``python``, the script its entrypoint: the driver log (exit 0 asserted)."""
    storage, wandb_dir = tmp_path / "run", tmp_path / "wandb"
    storage.mkdir(exist_ok=True)
    wandb_dir.mkdir(exist_ok=True)
    (tmp_path / "script.py").write_text(SCRIPT)
    tracking = {"wandb": {"project": "rtjob-e2e"}, "params": {"lr": "0.1"}, "source": "jobs/t.yaml",
                "tags": {contract.META_JOB: "job", "rtjob.backend": "ray", "mlflow.source.git.commit": "abc123"}}
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{REPO / 'cli'}:{REPO}", "HOME": str(tmp_path),
           "RTJOB_RUN_NAME": "r-wandb-1", "RTJOB_JOB_NAME": "job", "RTJOB_COMPANION_INTERVAL_S": "0.2",
           "RTJOB_RUN_URI": str(storage), "RTJOB_RUN_DIR": str(storage), "API_KEY": SECRET,
           contract.ENV_TRACKING: json.dumps(tracking), "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir),
           "WANDB_SILENT": "true", **extra}
    log = tmp_path / "driver.log"
    command = (f"{shlex.quote(str(python))} -m rtjob.runside.companion "
               f"{shlex.quote(shlex.quote(str(python)) + ' script.py')}")
    with open(log, "w") as out:
        rc = subprocess.run(command, shell=True, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                            start_new_session=True, timeout=180).returncode
    text = log.read_text()
    record_output(text)  # the suite's secret check reads it too
    assert rc == 0, text[-3000:]
    return text


def test_a_plain_scripts_run_is_one_offline_wandb_run_with_its_steps_epochs_and_config(wandb_python, tmp_path):
    storage, wandb_dir = tmp_path / "run", tmp_path / "wandb"
    text = companion(wandb_python, tmp_path)
    assert "mirrored to W&B" in text and SECRET not in text, text[-3000:]

    runs = sorted(wandb_dir.glob("wandb/offline-run-*-r-wandb-1/run-r-wandb-1.wandb"))
    assert len(runs) == 1, sorted(p.name for p in wandb_dir.rglob("*"))
    records = wandb_offline.records(runs[0])
    run = next(r["run"] for r in records if r["type"] == "run")
    assert run["runId"] == "r-wandb-1" and run["displayName"] == "r-wandb-1" and run["project"] == "rtjob-e2e"
    config = {item["key"]: json.loads(item["valueJson"]) for item in run["config"]["update"]}
    assert config["lr"] == "0.1" and "API_KEY" not in config and SECRET not in json.dumps(records)
    assert config["rtjob"][contract.META_ATTEMPT] == "1" and config["rtjob"][contract.META_JOB] == "job"
    assert config["rtjob"]["rtjob.status_command"] == "rtjob status r-wandb-1"
    rows = wandb_offline.history(records)
    assert sorted(r["_step"] for r in rows if "loss" in r) == list(range(12))  # every step, at its step, once
    assert sorted((r["epoch"], r["val_loss"]) for r in rows if "val_loss" in r) == [(1, 0.5), (2, 0.25)]
    system = [r for r in rows if "nodes/worker_a/cpu_utilization_percentage" in r]  # under nodes/NODE/, once
    assert [r["nodes/worker_a/cpu_utilization_percentage"] for r in system] == [42.0], sorted({k for r in rows for k in r})
    exits = [r["exit"] for r in records if r["type"] == "exit"]
    assert exits and exits[-1].get("exitCode", 0) == 0

    record = json.loads((storage / contract.RUN_RECORD_FILE).read_text())
    noted = record["tracking"]["wandb"]
    assert noted["run_id"] == "r-wandb-1" and noted["mode"] == "offline" and "fault" not in noted, noted
    assert noted["dir"] == str(runs[0].parent)
    assert tracking_lines(record["tracking"]) == [f"wandb:       {runs[0].parent} (offline: `wandb sync` sends it)"]

    # A retry (attempt 2, the same rtjob run): the same W&B run id, resumed (resume="allow"), the attempt in its
    # config, its steps going on; offline, W&B writes the attempt's records beside the first's (`wandb sync` sends
    # both into the one run).
    companion(wandb_python, tmp_path, FIRST_STEP="12",
              RAY_JOB_CONFIG_JSON_ENV_VAR=json.dumps({"metadata": {contract.META_ATTEMPT: "2"}}))
    again = [p for p in sorted(wandb_dir.glob("wandb/offline-run-*-r-wandb-1/run-r-wandb-1.wandb")) if p != runs[0]]
    assert len(again) == 1
    records = wandb_offline.records(again[0])
    run = next(r["run"] for r in records if r["type"] == "run")
    config = {item["key"]: json.loads(item["valueJson"]) for item in run["config"]["update"]}
    assert run["runId"] == "r-wandb-1" and config["rtjob"][contract.META_ATTEMPT] == "2"
    assert {r["_step"] for r in wandb_offline.history(records) if "loss" in r} >= set(range(12, 24))


def test_a_job_environment_without_wandb_is_one_line_and_the_records_note(tmp_path):
    text = companion(Path(sys.executable), tmp_path)  # rtjob's own venv: no wandb in it
    assert "the job's environment has no `wandb` package" in text
    record = json.loads((tmp_path / "run" / contract.RUN_RECORD_FILE).read_text())
    assert record["status"] == "SUCCEEDED" and record["tracking"]["wandb"]["fault"].startswith("no wandb")
    assert tracking_lines(record["tracking"])[1] == "wandb:       no wandb package in the job's environment"
