"""The run side through real storage faults: the companion (a real process, run as Ray's job supervisor runs it)
writing to a real S3 server (moto) behind a loopback forwarder that is taken down or made to answer 502s and cut
connections (support/outage.py). Nothing is lost: the end waits for storage, a file that failed is tried again
until it is stored, past the grace the node keeps the only copy (its marker, the driver log's event line), no
remover deletes it, and `rtjob sync` stores it once storage is back."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import REPO, base_env, rtjob
from support.outage import Forwarder
from support.s3_server import S3Server, bucket_fixture

BUCKET = "companion-faults"
s3 = bucket_fixture(BUCKET)

# Writes six files into RTJOB_RUN_DIR, one every 0.5 s (the last one after a pause of PAUSE_S), then exits 0.
SCRIPT = """
import os, sys, time
d = os.environ["RTJOB_RUN_DIR"]
for i in range(6):
    if i == 5:
        time.sleep(float(os.environ.get("PAUSE_S", "0")))
    with open(os.path.join(d, f"out-{i}.txt"), "w") as f:
        f.write(f"file {i}\\n" * 100)
    print(f"wrote file {i}", flush=True)
    time.sleep(0.5)
print("done", flush=True)
"""


@pytest.fixture
def forwarder(s3: S3Server) -> Iterator[Forwarder]:
    host, port = s3.endpoint.removeprefix("http://").split(":")
    with Forwarder(host, int(port)) as fwd:
        yield fwd


class Run:
    def __init__(self, tmp_path: Path, s3: S3Server, forwarder: Forwarder, **env: str) -> None:
        self.id = f"r-{uuid.uuid4().hex[:8]}"
        self.uri = f"s3://{BUCKET}/runs/job/{self.id}"
        self.tmp = tmp_path / "tmp"  # the node folders' root (TMPDIR), this test's own
        self.tmp.mkdir()
        self.log = tmp_path / "job-driver.log"
        self.log.write_text("Running entrypoint for job ...\n")
        self.env = {**base_env(tmp_path / "home"), **s3.env(), "AWS_ENDPOINT_URL": forwarder.url,
                    "AWS_EC2_METADATA_DISABLED": "true", "TMPDIR": str(self.tmp), "PYTHONPATH": f"{REPO / 'cli'}:{REPO}",
                    "RTJOB_RUN_NAME": self.id, "RTJOB_JOB_NAME": "job", "RTJOB_RUN_URI": self.uri,
                    "RTJOB_COMPANION_INTERVAL_S": "0.3", "RTJOB_COMPANION_HEARTBEAT_S": "1", **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        entry = f"{shlex.quote(sys.executable)} -c {shlex.quote(SCRIPT)}"
        command = f"{shlex.quote(sys.executable)} -m rtjob.runside.companion {shlex.quote(entry)}"
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(command, shell=True, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)

    def wait(self, timeout: float = 120) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return self.log.read_text()

    def until_in_log(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            assert time.monotonic() < deadline, f"{text!r} never in the log:\n{self.text()}"
            time.sleep(0.1)

    def folders(self) -> list[Path]:
        return sorted(p for p in self.tmp.glob(f"rtjob-run-dirs-*/{self.id}*") if p.is_dir())


def _keys(s3: S3Server, run: Run) -> set[str]:
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"runs/job/{run.id}/").get("Contents", [])
    return {item["Key"].split(f"{run.id}/", 1)[1] for item in listed}


def _record(s3: S3Server, run: Run) -> dict:
    body = s3.client().get_object(Bucket=BUCKET, Key=f"runs/job/{run.id}/rtjob-run.json")["Body"].read()
    return json.loads(body)


FILES = {f"out-{i}.txt" for i in range(6)}


def test_an_outage_while_the_run_ends_is_waited_out_and_nothing_is_lost(tmp_path: Path, s3: S3Server,
                                                                        forwarder: Forwarder) -> None:
    run = Run(tmp_path, s3, forwarder, PAUSE_S="1")
    run.start()
    run.until_in_log("wrote file 4")
    forwarder.down()  # storage unreachable while the last file is written and the run ends
    run.until_in_log("waiting up to 600s")
    assert run.proc is not None and run.proc.poll() is None  # the companion waits: it has not exited
    assert run.folders() and (run.folders()[0] / "rtjob-kept.json").exists()  # the only copy, marked kept
    forwarder.up()
    assert run.wait() == 0
    assert _keys(s3, run) >= FILES
    record = _record(s3, run)
    assert (record["status"], record["outputs"]) == ("SUCCEEDED", {"complete": True})
    assert "the run's files and end are stored" in run.text()
    assert not run.folders()  # removed only once everything is stored


def test_502s_and_cut_connections_mid_run_lose_no_file_and_no_log_line(tmp_path: Path, s3: S3Server,
                                                                       forwarder: Forwarder) -> None:
    run = Run(tmp_path, s3, forwarder)
    run.start()
    run.until_in_log("wrote file 0")
    forwarder.faults(4.0)
    assert run.wait() == 0
    assert sum(forwarder.injected.values()) > 0
    assert _keys(s3, run) >= FILES
    client = s3.client()
    for i in range(6):
        body = client.get_object(Bucket=BUCKET, Key=f"runs/job/{run.id}/out-{i}.txt")["Body"].read().decode()
        assert body == f"file {i}\n" * 100
    log = client.get_object(Bucket=BUCKET, Key=f"runs/job/{run.id}/logs/driver.log")["Body"].read().decode()
    for i in range(6):
        assert log.count(f"wrote file {i}\n") == 1
    assert _record(s3, run)["outputs"] == {"complete": True}


def _ended_in_an_outage(run: Run, forwarder: Forwarder, line: str) -> Run:
    """``run`` started, storage taken down once its log says ``line``, and ended with the script's exit code 0
    (whatever storage did)."""
    run.start()
    run.until_in_log(line)
    forwarder.down()
    assert run.wait() == 0
    return run


def test_past_the_grace_the_node_keeps_the_only_copy_until_rtjob_sync_stores_it(tmp_path: Path, s3: S3Server,
                                                                                forwarder: Forwarder) -> None:
    run = _ended_in_an_outage(Run(tmp_path, s3, forwarder, RTJOB_STORAGE_GRACE_S="2"), forwarder, "wrote file 3")
    text = run.text()
    assert "outputs not stored" in text and f"rtjob sync {run.id}" in text
    event = next(line for line in text.splitlines() if line.startswith("rtjob-event: outputs_not_stored "))
    said = json.loads(event.split(" ", 2)[2])
    assert said["status"] == "SUCCEEDED" and said["not_stored"] >= 2 and said["record_stored"] is False
    kept = run.folders()
    assert len(kept) == 1
    marker = json.loads((kept[0] / "rtjob-kept.json").read_text())
    assert marker["storing"] is False and marker["end"]["status"] == "SUCCEEDED"
    assert (kept[0] / "log" / f"{run.id}.log").read_text().count("wrote file 5") == 1

    # A retry on this node moves the kept folder aside (never empties it); its own folder is fresh.
    from rtjob.storage import node_dirs

    old_tmp = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(run.tmp)
    try:
        import tempfile

        tempfile.tempdir = None
        fresh = node_dirs.fresh_run_folder(run.id)
        assert not os.listdir(fresh)
        aside = [p for p in run.folders() if p != Path(fresh)]
        assert len(aside) == 1 and (aside[0] / "run" / "out-5.txt").exists()
        assert not node_dirs.remove_run_folder(aside[0].name)  # no remover deletes a kept folder
        node_dirs.remove_run_folder(run.id)
    finally:
        if old_tmp is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = old_tmp
        tempfile.tempdir = None

    # Storage is back: rtjob sync stores the files, the log and the end; the run reads complete.
    forwarder.up()
    env = {**run.env, "RTJOB_STORAGE": f"s3://{BUCKET}/runs"}
    synced = rtjob("sync", run.id, env=env, timeout=120)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "outputs complete" in synced.stderr + synced.stdout
    assert _keys(s3, run) >= FILES and f"logs/{run.id}.log" in _keys(s3, run)
    record = _record(s3, run)
    assert (record["status"], record["exit_code"], record["outputs"]) == ("SUCCEEDED", 0, {"complete": True})
    assert not run.folders()
    shown = rtjob("status", run.id, "-o", "json", env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["outputs"] == {"complete": True}


def test_sync_while_storage_still_refuses_exits_3_and_removes_nothing(tmp_path: Path, s3: S3Server,
                                                                     forwarder: Forwarder) -> None:
    run = _ended_in_an_outage(Run(tmp_path, s3, forwarder, RTJOB_STORAGE_GRACE_S="1"), forwarder, "wrote file 4")
    env = {**run.env, "RTJOB_STORAGE_PATIENCE_S": "1"}
    synced = rtjob("sync", run.id, env=env, timeout=120)
    assert synced.returncode == 3, synced.stdout + synced.stderr
    assert "Traceback" not in synced.stderr and len(synced.stderr.strip().splitlines()[-1]) < 400
    assert len(run.folders()) == 1 and (run.folders()[0] / "rtjob-kept.json").exists()
