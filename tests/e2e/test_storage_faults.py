"""Nothing lost when storage fails, on a real embedded Ray cluster (its own, in a private RTJOB_HOME) with S3 storage
on a real S3 server (moto) behind a loopback forwarder that is taken down and brought back on the same port
(support/outage.py). Runs are submitted with --no-wait: no rtjob process is alive while they end.

- An outage while the run ends: its companion waits; `local down` right then waits for it instead of recording it
  STOPPED; once storage is back the bucket holds every file and the record's end, a second HOME's `runs --storage`
  says SUCCEEDED, and nothing unsynced was deleted.
- An outage longer than a short RTJOB_STORAGE_GRACE_S: "outputs not stored" in `wait` (exit 3), `status` and
  `-o json`; the node folder kept through `local down`; `rtjob sync` completes it once storage is back.
- The same cluster reached as a plain Ray cluster from a client whose temp folder is elsewhere (as from another
  machine): `rtjob sync` runs a job pinned to the node that keeps the outputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.storage.node_dirs import run_folder
from support.cli import RTJOB, base_env, new_id, record, rtjob
from support.outage import Forwarder
from support.ray_jobs import wait_for
from support.s3_server import S3Server, bucket_fixture

pytestmark = pytest.mark.cluster

BUCKET = "storage-faults"
s3 = bucket_fixture(BUCKET)

SCRIPT = '''
import os, sys, time
run_dir = os.environ["RTJOB_RUN_DIR"]
for i in range(4):
    with open(os.path.join(run_dir, f"epoch-{i}.txt"), "w") as f:
        f.write(f"epoch {i}\\n" * 50)
    print(f"epoch {i} written", flush=True)
    time.sleep(0.3)
print("about to end", flush=True)
deadline = time.time() + 300
while not os.path.exists(sys.argv[1]) and time.time() < deadline:  # the test opens it once storage is down
    time.sleep(0.05)
with open(os.path.join(run_dir, "model.txt"), "w") as f:
    f.write("epoch=final\\n")
print("last file written", flush=True)
'''
JOB = """
name: faults
entrypoint: python faults.py /nonexistent-gate
working_dir: ..
requirements: []
"""
FILES = {"epoch-0.txt", "epoch-1.txt", "epoch-2.txt", "epoch-3.txt", "model.txt"}


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """The module's own embedded cluster (started by the first submit; each test that stops it, the next starts)."""
    path = Path(tempfile.mkdtemp(prefix="rtjob-faults-", dir="/tmp"))
    try:
        yield path
    finally:
        rtjob("local", "down", env=base_env(path), timeout=180)  # the test's own cluster, stopped by pid
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def forwarder(s3: S3Server) -> Iterator[Forwarder]:
    host, port = s3.endpoint.removeprefix("http://").split(":")
    with Forwarder(host, int(port)) as fwd:
        yield fwd


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faults") / "project"
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "faults.yaml").write_text(JOB)
    (root / "faults.py").write_text(SCRIPT)
    return root


def _env(home: Path, s3: S3Server, forwarder: Forwarder, project: Path) -> dict[str, str]:
    return {**base_env(home), **s3.env(), "AWS_ENDPOINT_URL": forwarder.url, "AWS_EC2_METADATA_DISABLED": "true",
            "RTJOB_PROJECT": str(project), "RTJOB_STORAGE": f"s3://{BUCKET}/runs",
            "RTJOB_STORAGE_PATIENCE_S": "2"}  # this client's reads while storage is down give up soon


def _submit(env: dict[str, str], project: Path, gate: Path, *extra: str) -> str:
    """The run writes its epochs, says "about to end", and writes its last file only once ``gate`` exists: the
    test opens it after storage went down, so that last file is written during the outage however slow the
    machine (a fixed sleep there raced the log's upload on a busy CI machine)."""
    run_id = new_id("faults")
    proc = rtjob("submit", "faults", "--forward-aws-credentials", "--no-wait", "--submission-id", run_id,
                 "--env", "RTJOB_COMPANION_INTERVAL_S=0.5", "--set", f"entrypoint=python faults.py {gate}", *extra,
                 env=env, cwd=project, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_id


def _keys(s3: S3Server, run_id: str) -> set[str]:
    prefix = f"runs/faults/{run_id}/"
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {item["Key"][len(prefix):] for item in listed}


def _record(s3: S3Server, run_id: str) -> dict[str, Any]:
    return json.loads(s3.client().get_object(Bucket=BUCKET, Key=f"runs/faults/{run_id}/rtjob-run.json")["Body"].read())


def _log_so_far(s3: S3Server, run_id: str) -> str:
    prefix = f"runs/faults/{run_id}/logs/{run_id}/"
    client = s3.client()
    names = sorted(item["Key"] for item in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))
    return "".join(client.get_object(Bucket=BUCKET, Key=name)["Body"].read().decode() for name in names)


def _storing(run_id: str) -> bool:
    marker = Path(run_folder(run_id)) / "rtjob-kept.json"
    return marker.exists() and json.loads(marker.read_text()).get("storing") is True


def test_rtjob_sync_runs_on_the_node_that_keeps_the_outputs_when_that_node_is_not_this_machine(
        home: Path, s3: S3Server, forwarder: Forwarder, project: Path, tmp_path: Path) -> None:
    """The cluster reached as a plain Ray cluster (its address, not as the embedded one) and this client's own
    temp folder elsewhere, as on a machine that is not the cluster's node: `rtjob sync` runs a job pinned to the
    node that drove the run, which stores what that node kept; while storage still refuses, that job's line, exit 3."""
    env = _env(home, s3, forwarder, project)
    run_id = _submit(env, project, tmp_path / "gate", "--env", "RTJOB_STORAGE_GRACE_S=2")
    wait_for(lambda: "about to end" in _log_so_far(s3, run_id), 180, "the run's last epoch")
    forwarder.down()
    (tmp_path / "gate").touch()
    wait_for(lambda: (Path(run_folder(run_id)) / "rtjob-kept.json").exists() and not _storing(run_id), 120,
             "the companion keeping the outputs")
    exports = rtjob("local", "env", env=env, timeout=60)
    assert exports.returncode == 0, exports.stderr
    ray_env = dict(line.removeprefix("export ").split("=", 1) for line in exports.stdout.splitlines())
    ray_env = {name: value.strip("'\"") for name, value in ray_env.items()}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    remote = {**env, **ray_env, "TMPDIR": str(elsewhere), "RTJOB_STORAGE_PATIENCE_S": "1"}
    address = ray_env["RAY_API_SERVER_ADDRESS"]
    refused = rtjob("sync", run_id, "--backend", "ray", "--address", address, env=remote, cwd=project, timeout=300)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "not stored" in refused.stderr and (Path(run_folder(run_id)) / "rtjob-kept.json").exists()
    forwarder.up()
    synced = rtjob("sync", run_id, "--backend", "ray", "--address", address, env=remote, cwd=project, timeout=300)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "stored" in synced.stderr and "outputs complete" in synced.stderr
    assert _keys(s3, run_id) >= FILES
    assert _record(s3, run_id)["outputs"] == {"complete": True}
    assert not Path(run_folder(run_id)).exists()
    listed = rtjob("list", "--backend", "ray", "--address", address, "-o", "json", env=remote, timeout=120)
    assert listed.returncode == 0 and not [r for r in json.loads(listed.stdout) if "-sync-" in r["id"]]


def test_an_outage_while_a_run_ends_loses_nothing_and_local_down_waits_for_it(
        home: Path, s3: S3Server, forwarder: Forwarder, project: Path, tmp_path: Path) -> None:
    env = _env(home, s3, forwarder, project)
    run_id = _submit(env, project, tmp_path / "gate")
    wait_for(lambda: "about to end" in _log_so_far(s3, run_id), 180, "the run's last epoch")
    forwarder.down()  # storage unreachable while the run writes its last file and ends
    (tmp_path / "gate").touch()
    wait_for(lambda: _storing(run_id), 60, "the companion waiting for storage")
    down = subprocess.Popen([*RTJOB, "local", "down"], env=env, cwd=project, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(iter(down.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_for(lambda: any("still storing" in line for line in said) or down.poll() is not None, 120,
                 "local down waiting for the storing companion")
        forwarder.up()
        down.wait(timeout=180)
        reader.join(timeout=10)
    finally:
        if down.poll() is None:
            down.kill()
    err = "".join(said)
    record(err)
    assert down.returncode == 0, err
    assert f"{run_id}: its companion is still storing" in err
    assert _keys(s3, run_id) >= FILES | {"logs/driver.log"}
    stored = _record(s3, run_id)
    assert (stored["status"], stored["completed_by"], stored["outputs"]) == ("SUCCEEDED", "companion",
                                                                            {"complete": True})
    assert not Path(run_folder(run_id)).exists()  # removed by the companion once everything was stored
    teammate = {**base_env(tmp_path / "teammate"), **s3.env(), "AWS_EC2_METADATA_DISABLED": "true"}
    listed = rtjob("runs", "--storage", f"s3://{BUCKET}/runs", "-o", "json", env=teammate, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert {run["id"]: run["status"] for run in json.loads(listed.stdout)}[run_id] == "SUCCEEDED"


def test_outputs_not_stored_past_the_grace_are_kept_through_local_down_and_completed_by_rtjob_sync(
        home: Path, s3: S3Server, forwarder: Forwarder, project: Path, tmp_path: Path) -> None:
    env = _env(home, s3, forwarder, project)
    run_id = _submit(env, project, tmp_path / "gate", "--env", "RTJOB_STORAGE_GRACE_S=3")
    wait_for(lambda: "about to end" in _log_so_far(s3, run_id), 180, "the run's last epoch")
    forwarder.down()
    (tmp_path / "gate").touch()
    waited = rtjob("wait", run_id, "--timeout", "5m", env=env, cwd=project, timeout=400)
    assert waited.returncode == 3, waited.stdout + waited.stderr
    assert "outputs not stored" in waited.stderr and f"rtjob sync {run_id}" in waited.stderr
    shown = rtjob("status", run_id, "-o", "json", env=env, cwd=project, timeout=120)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "SUCCEEDED" and data["outputs"]["complete"] is False
    assert data["outputs"]["not_stored"] >= 1 and run_folder(run_id) in data["outputs"]["kept_at"]
    text = rtjob("status", run_id, env=env, cwd=project, timeout=120)
    assert "outputs:     NOT STORED" in text.stdout, text.stdout

    down = rtjob("local", "down", env=env, cwd=project, timeout=240)
    assert down.returncode == 0, down.stderr
    assert f"kept {run_folder(run_id)}" in down.stderr
    assert (Path(run_folder(run_id)) / "run" / "model.txt").read_text() == "epoch=final\n"  # the only copy

    forwarder.up()
    synced = rtjob("sync", run_id, env=env, cwd=project, timeout=240)
    assert synced.returncode == 0, synced.stderr
    assert _keys(s3, run_id) >= FILES | {f"logs/{run_id}.log"}
    stored = _record(s3, run_id)
    assert (stored["status"], stored["exit_code"], stored["outputs"]) == ("SUCCEEDED", 0, {"complete": True})
    assert not Path(run_folder(run_id)).exists()
    teammate = {**base_env(tmp_path / "teammate"), **s3.env(), "AWS_EC2_METADATA_DISABLED": "true",
                "RTJOB_STORAGE": f"s3://{BUCKET}/runs"}
    theirs = rtjob("status", run_id, "-o", "json", env=teammate, timeout=120)
    assert theirs.returncode == 0, theirs.stderr
    assert json.loads(theirs.stdout)["outputs"] == {"complete": True}

