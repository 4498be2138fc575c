"""Runs that finish their own story (issue 25), on the real embedded cluster with S3 storage (moto on loopback) and a
webhook receiver on loopback: submitted with --no-wait, the client gone, the run's companion writes the script's
files, the whole log (as parts, then driver.log) and the completed record to storage, and sends one message.

Until every assertion on the run side is made, the run is observed only through storage (boto3) and Ray's Jobs API
read directly: rtjob commands archive what they see, which would hide a companion that wrote nothing."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.exceptions import FlexibleChecksumError
from rtjob.core.model import stamp
from support.cli import PLANTED, new_id, rtjob
from support.ray_jobs import wait_for
from support.s3_server import bucket_fixture
from support.webhook import Receiver, receiving

pytestmark = pytest.mark.cluster

BUCKET = "side-runs"
QUEUE = "side"  # a team queue in the bucket (the secrets test's queued variant)
HOOK_SECRET = "hookpathsecret9f8e7d6c"  # the webhook URL's secret path segment (as Slack's carry theirs)
TOKEN = "side-api-token-5a4b3c2d1e"  # a secret env value the script prints
PLANTED.update({HOOK_SECRET, TOKEN})

s3 = bucket_fixture(BUCKET)

SCRIPT = '''
import json, os, sys, time
run_dir = os.environ["RTJOB_RUN_DIR"]  # a local folder: the companion syncs it to RTJOB_RUN_URI
os.makedirs(run_dir, exist_ok=True)
print("using token", os.environ["SIDE_API_TOKEN"], flush=True)
rows = []
for epoch in (1, 2):
    rows.append({"epoch": epoch, "train_loss": 1.0 / epoch, "val_loss": 1.5 / epoch, "val_accuracy": 0.4 * epoch})
    folder = os.path.join(run_dir, f"checkpoint_epoch_{epoch:04d}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.pt"), "wb") as f:
        f.write(os.urandom(1024))
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(rows, f)
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"epoch": epoch}, f)
with open(os.path.join(run_dir, "metrics.json"), "w") as f:
    json.dump(rows, f)
mib = int(sys.argv[1])  # lines of 1 KiB: MiB of log
line = "x" * 1015  # 1 KiB and a byte with its number and newline
for i in range(mib * 1024):
    print(f"{i:08d} {line}")
print("script done", flush=True)
live = open(os.path.join(run_dir, "metrics.jsonl"), "a")  # kept open, as a metrics logger keeps its file
for i in range(int(sys.argv[2])):  # then a line every 0.2 s (a run to stop or kill)
    print(f"tick {i}", flush=True)
    live.write(json.dumps({"step": 1000 + i, "time": time.time(), "loss": 1 / (i + 1)}) + "\\n")
    live.flush()
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:  # rewritten, as an epoch loop rewrites it
        json.dump(rows + [{"epoch": 3 + i, "train_loss": 0.1}], f)
    if i % 5 == 0:  # a step row as rtjob's entrypoints print it (rank 0; Ray forwards a worker's)
        print("rtjob-event: step_row " + json.dumps({"step": i, "time": time.time(), "loss": 2.0}), flush=True)
    time.sleep(0.2)
'''

JOB = """
name: side
entrypoint: python side.py
working_dir: ..
requirements: []
notify:
  on: [succeeded, failed, stopped]
  targets:
    - type: webhook
      url: {env: SIDE_HOOK}
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """One webhook receiver for the module's runs (the module-scoped `env` names it)."""
    with receiving() as rec:
        yield rec


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("side-project")
    (root / "jobs").mkdir()
    (root / "jobs" / "side.yaml").write_text(JOB)
    (root / "side.py").write_text(SCRIPT)
    (root / "pyproject.toml").write_text(f"[tool.rtjob.queues.{QUEUE}]\nmax_running = 2\n")  # the queued variant's
    return root


@pytest.fixture(scope="module")
def env(cluster_env: dict[str, str], s3: Any, receiver: Receiver, project: Path) -> dict[str, str]:
    return {**cluster_env, **s3.env(), "SIDE_HOOK": receiver.url(f"/hooks/{HOOK_SECRET}"), "SIDE_API_TOKEN": TOKEN,
            "RTJOB_PROJECT": str(project)}


@pytest.fixture(scope="module")
def jobs_api(cluster_env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The embedded cluster's Jobs API, read directly (the address and token `rtjob local env` exports)."""
    proc = rtjob("local", "env", env=cluster_env)
    assert proc.returncode == 0, proc.stderr
    exports = dict(re.findall(r"^export (\w+)=['\"]?([^'\"\n]*)['\"]?$", proc.stdout, re.M))
    token = Path(exports["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    return exports["RAY_API_SERVER_ADDRESS"], {"Authorization": f"Bearer {token}"}


def submit(env: dict[str, str], run_id: str, mib: int, ticks: int, project: Path) -> None:
    proc = rtjob("submit", "side", "--storage", f"s3://{BUCKET}/runs", "--forward-aws-credentials", "--no-wait",
                 "--submission-id", run_id, "--env", "RTJOB_COMPANION_INTERVAL_S=1", "--env",
                 "SIDE_API_TOKEN=" + TOKEN, "--set", f"entrypoint=python side.py {mib} {ticks}",
                 "-o", "json", env=env, cwd=project, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["id"] == run_id


def keys(s3: Any, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out.update({o["Key"][len(prefix):]: o["Size"] for o in page.get("Contents", [])})
    return out


def body(s3: Any, key: str) -> bytes:
    return s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()


def record(s3: Any, folder: str) -> dict[str, Any] | None:
    try:
        return json.loads(body(s3, f"{folder}/rtjob-run.json"))
    except Exception:  # noqa: BLE001 - not written yet
        return None


def parts(s3: Any, folder: str, run_id: str) -> bytes:
    prefix = f"{folder}/logs/{run_id}/"
    return b"".join(body(s3, prefix + name) for name in sorted(keys(s3, prefix)))


def driver_log(jobs_api: tuple[str, dict[str, str]], run_id: str) -> str:
    address, headers = jobs_api
    answer = requests.get(f"{address}/api/jobs/{run_id}/logs", headers=headers, timeout=120)
    answer.raise_for_status()
    return answer.json()["logs"]


def test_an_unwatched_run_leaves_its_files_whole_log_record_and_one_message(env, s3, receiver, project, jobs_api,
                                                                          tmp_path):
    run_id = new_id("side")
    folder = f"runs/side/{run_id}"
    submit(env, run_id, mib=40, ticks=0, project=project)  # the client exits at once; nothing follows the run
    done = wait_for(lambda: (r := record(s3, folder)) and r.get("completed_by") and r, 300, "the companion's end")
    assert done["status"] == "SUCCEEDED" and done["completed_by"] == "companion" and done["exit_code"] == 0
    assert done["carried_by"] == "companion" and done["archived"]
    assert done["logs"] == [f"logs/{run_id}.log", "logs/driver.log"]  # the attempt's archived log, and the latest
    timeline = done["timeline"]
    assert timeline["submitted"] <= timeline["accepted"] <= timeline["driver_started"] <= timeline["ended"]

    # The script's files, written to a local RTJOB_RUN_DIR, are in the run's storage.
    stored = keys(s3, folder + "/")
    for name in ("metrics.json", "checkpoint_epoch_0002/model.pt", "checkpoint_epoch_0002/state.json"):
        assert name in stored, sorted(stored)
    assert not any(k.startswith("s3:") for k in stored)

    # The whole 40 MiB log: the parts joined equal the driver's file, masked; driver.log is the same bytes.
    joined = parts(s3, folder, run_id)
    log = driver_log(jobs_api, run_id)
    assert len(joined) > 40 * 1024 * 1024 and TOKEN in log and TOKEN not in joined.decode()
    assert joined.decode() == log.replace(TOKEN, "****")
    assert body(s3, f"{folder}/logs/driver.log") == joined == body(s3, f"{folder}/logs/{run_id}.log")

    # Exactly one message, with what a person needs; the hook's secret is nowhere in storage.
    wait_for(lambda: receiver.for_run(run_id), 30, "the webhook")
    [message] = receiver.for_run(run_id)
    assert message["outcome"] == "succeeded" and message["job"] == "side" and f"rtjob logs {run_id}" in json.dumps(message)
    for key in stored:
        if key.endswith((".json", ".log")) or "/logs/" in key:
            assert HOOK_SECRET.encode() not in body(s3, f"{folder}/{key}"), key

    # Now rtjob: results and pull by run id (a plain script with s3:// storage), logs streamed from storage.
    results = rtjob("results", run_id, "-o", "json", env=env, cwd=project, timeout=120)
    assert results.returncode == 0, results.stderr
    assert [row["epoch"] for row in json.loads(results.stdout)[0]["history"]] == [1, 2]
    # (outside the project: a later run's working dir would ship what was pulled)
    pulled = rtjob("pull", run_id, "--to", str(tmp_path / "pulled"), "-o", "json", env=env, cwd=project, timeout=120)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "pulled" / "checkpoint_epoch_0002" / "model.pt").stat().st_size == 1024
    tail = rtjob("logs", run_id, "--tail", "2", env=env, cwd=project, timeout=120)
    assert tail.returncode == 0 and tail.stdout.splitlines()[-1] == "script done", tail.stderr


def test_a_driver_killed_mid_run_loses_at_most_the_last_interval(env, s3, project, jobs_api, tmp_path):
    run_id = new_id("kill")
    folder = f"runs/side/{run_id}"
    submit(env, run_id, mib=0, ticks=600, project=project)
    wait_for(lambda: b"tick 20" in parts(s3, folder, run_id), 120, "20 ticks in storage")
    companion = _companion_of(run_id)
    os.killpg(os.getpgid(companion), signal.SIGKILL)  # the driver's node lost: the companion dies with it
    address, headers = jobs_api
    wait_for(lambda: requests.get(f"{address}/api/jobs/{run_id}", headers=headers, timeout=30).json()["status"]
               in ("FAILED", "STOPPED"), 120, "Ray to see the driver gone")
    stored = parts(s3, folder, run_id).decode()
    log = driver_log(jobs_api, run_id).replace(TOKEN, "****")  # the parts are masked
    assert log.startswith(stored)  # a prefix of the driver's file, nothing reordered or doubled
    lost = log[len(stored):].count("tick ")
    assert lost <= 10, f"{lost} lines lost (a 1 s interval at 5 lines/s, plus the kill's own moment)"
    kept = record(s3, folder)
    assert kept is not None and kept.get("completed_by") is None and kept["last_seen"]  # nobody wrote its end
    # A teammate reading later than STALE_S after its companion's last beat (their clock moved on; nothing else
    # is): UNKNOWN, its companion lost, in every view (`runs --storage`, `status`, `show`, the UI's list, page, API).
    import datetime as dt

    from rtjob.core import clock
    from rtjob.core.record import STALE_S
    from support.agree import views
    from support.cli import base_env

    later = clock.parse(kept["last_seen"]) + dt.timedelta(seconds=STALE_S + 60)
    seen = views(run_id, f"s3://{BUCKET}/runs", {**base_env(tmp_path / "teammate"), **s3.env()}, now=later)
    agreed = seen.agree()
    assert (agreed["status"], agreed["reason"], agreed["duration_s"]) == ("UNKNOWN", "companion_lost", None), agreed
    assert agreed["line"] == f"its companion was last seen {stamp(kept['last_seen'])}", agreed


def test_rtjob_stop_is_recorded_stopped_with_the_files_whole_log_and_one_message(env, s3, receiver, project):
    """The stop is recorded; its message, which the target refuses (HTTP 500) for all the companion's tries, is
    recorded not delivered (no `rtjob-notified-stopped`), and `rtjob notify` sends it once the target is back."""
    run_id = new_id("stop")
    folder = f"runs/side/{run_id}"
    hook = f"/hooks/{HOOK_SECRET}"
    receiver.script[hook] = [500, 500, 500]  # the target is down for the companion's 3 tries
    submit(env, run_id, mib=0, ticks=600, project=project)
    wait_for(lambda: b"tick 3" in parts(s3, folder, run_id), 120, "the run to tick")

    # While it runs (issue 36): the script's own metrics.jsonl (held open, appended every 0.2 s) and metrics.json
    # (rewritten every 0.2 s) never settle, yet the periodic sync uploads them; the step rows it prints as event
    # lines reach the same metrics.jsonl through the companion, which also samples its node (no nvidia-smi here).
    def lines(name: str) -> list[dict]:  # a snapshot's whole lines (one still being written is left for later)
        return [json.loads(line) for line in body(s3, f"{folder}/{name}").decode().split("\n")[:-1]]

    def live() -> tuple[list[int], list[int], list[dict]] | None:
        stored = keys(s3, folder + "/")
        if not {"metrics.jsonl", "system.jsonl"} <= set(stored):
            return None
        try:  # caught mid-rewrite (moto may serve one version's bytes with another's checksum): a later one is whole
            epochs = json.loads(body(s3, f"{folder}/metrics.json"))[-1]["epoch"]
            steps = [row["step"] for row in lines("metrics.jsonl")]
            ours, printed = [s for s in steps if s >= 1000], [s for s in steps if s < 1000]
            return (ours, printed, lines("system.jsonl")) if len(ours) >= 10 and len(printed) >= 2 and epochs > 3 \
                else None
        except (ValueError, FlexibleChecksumError):
            return None

    ours, printed, system = wait_for(live, 90, "live rows and metrics in storage while the run goes")
    assert record(s3, folder)["completed_by"] is None  # still running
    assert ours == list(range(1000, 1000 + len(ours)))  # the script's own rows: a prefix, in order
    assert printed == list(range(0, 5 * len(printed), 5))  # each printed row once, in order
    assert system[0]["gpus"] == [] and 0 < system[0]["mem_used_mb"] < system[0]["mem_total_mb"]
    assert set(system[0]) == {"time", "node", "cpu_percent", "mem_used_mb", "mem_total_mb", "gpus"}

    stop = rtjob("stop", run_id, env=env, cwd=project, timeout=120)
    assert stop.returncode == 0, stop.stderr
    done = wait_for(lambda: (r := record(s3, folder)) and r.get("completed_by") and r, 120, "the companion's end")
    assert done["status"] == "STOPPED" and done["completed_by"] == "companion"
    assert "metrics.json" in keys(s3, folder + "/")
    assert body(s3, f"{folder}/logs/driver.log") == parts(s3, folder, run_id)
    wait_for(lambda: "rtjob-undelivered-stopped" in keys(s3, folder + "/"), 60, "the undelivered message recorded")
    assert "rtjob-notified-stopped" not in keys(s3, folder + "/")
    undelivered = json.loads(body(s3, f"{folder}/rtjob-undelivered-stopped"))
    assert undelivered["undelivered"] == [{"target": "webhook target (SIDE_HOOK)",
                                           "error": "not sent after 3 tries (HTTP 500)"}], undelivered
    assert HOOK_SECRET not in json.dumps(undelivered)
    assert [m["outcome"] for m in receiver.for_run(run_id)] == ["stopped"] * 3  # three tries, each refused
    status = rtjob("status", run_id, env=env, cwd=project, timeout=120)
    assert f"notify:      stopped: not delivered (webhook target (SIDE_HOOK): not sent after 3 tries (HTTP 500)); " \
           f"rtjob notify {run_id} resends it" in status.stdout, status.stdout
    # The target is up again: `rtjob notify` sends it from here, once.
    resent = rtjob("notify", run_id, env=env, cwd=project, timeout=120)
    assert resent.returncode == 0 and "stopped: delivered to webhook target (SIDE_HOOK)" in resent.stderr, resent.stderr
    assert [m["outcome"] for m in receiver.for_run(run_id)] == ["stopped"] * 4
    assert "rtjob-notified-stopped" in keys(s3, folder + "/") and "rtjob-undelivered-stopped" not in keys(s3, folder + "/")
    again = rtjob("notify", run_id, env=env, cwd=project, timeout=120)
    assert again.returncode == 0 and "no undelivered notification" in again.stderr, again.stderr
    assert len(receiver.for_run(run_id)) == 4
    shown = json.loads(rtjob("show", run_id, "-o", "json", env=env, cwd=project, timeout=120).stdout)
    assert shown["notifications"]["stopped"]["delivered"] is True, shown["notifications"]


def _companion_of(run_id: str) -> int:
    """The pid of the run's companion on this machine (the embedded cluster's head node)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rtjob.runside.companion" in cmdline and f"RTJOB_RUN_NAME={run_id}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no companion process of {run_id}")


SEALED_TOKEN = "sealed-env-token-7c6b5a4f3e"  # an env: secret: the client holds it
FILE_TOKEN = "sealed-file-token-2d3e4f5a6b"  # a file:// secret: only the driver's node has it
SM_TOKEN = "secrets-manager-token-8a7b6c5d"  # an aws-sm:// secret (moto's Secrets Manager, a JSON key of it)
SSM_TOKEN = "ssm-parameter-token-1f2e3d4c"  # an ssm:// secret (moto's SSM, a SecureString)
PLANTED.update({SEALED_TOKEN, FILE_TOKEN, SM_TOKEN, SSM_TOKEN})

SECRET_SCRIPT = '''
import hashlib, json, os, ray
names = ("ENV_TOK", "FILE_TOK", "SM_TOK", "SSM_TOK", "AWS_SECRET_ACCESS_KEY")  # the last: forwarded, sealed too
def seen():
    return {n: hashlib.sha256(os.environ.get(n, "").encode()).hexdigest()[:16] for n in names}
print("driver " + json.dumps(seen()), flush=True)
print("printing my token", os.environ["ENV_TOK"], "and", os.environ["FILE_TOK"], flush=True)
ray.init()
worker = ray.remote(num_cpus=1)(seen)  # one plain Ray task on each of the cluster's two nodes
print("workers " + json.dumps(ray.get([worker.options(scheduling_strategy="SPREAD").remote() for _ in range(2)])),
      flush=True)
'''


def _ray_job_info(jobs_api: tuple[str, dict[str, str]], run_id: str) -> dict[str, str]:
    """What Ray's Jobs API answers about the run and every job rtjob started for it (its supervisor, its queue's
    keeper): their rows of the list, and each job's own answer (entrypoint, runtime_env, metadata), as text. Only
    these: the session's cluster also runs other modules' jobs, e.g. an Anyscale JobConfig, whose env carries
    forwarded credentials by design (docs/guide/secrets.md), from the same S3 server."""
    address, headers = jobs_api
    listed = requests.get(f"{address}/api/jobs/", headers=headers, timeout=60)
    assert listed.status_code == 200 and run_id in listed.text
    mine = [j for j in listed.json() if str(j.get("submission_id") or "").startswith(run_id)
            or (j.get("metadata") or {}).get("rtjob.supervises") in (run_id, f"queue:{QUEUE}")]
    ids = [j["submission_id"] for j in mine]
    out = {"Ray's job list": json.dumps(mine)}
    for job_id in ids:
        answer = requests.get(f"{address}/api/jobs/{job_id}", headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
        out[f"Ray's job info of {job_id}"] = json.dumps({k: answer.json().get(k) for k in
                                                         ("entrypoint", "runtime_env", "metadata")})
    return out


@pytest.mark.parametrize("queued", [False, True], ids=["submitted", "queued"])
def test_secrets_reach_driver_and_workers_and_never_rays_job_info(env, s3, receiver, project, jobs_api, tmp_path,
                                                                  queued):
    """Issue 45: an env: secret (sealed by the client), a file:// secret (read on the driver's node), an aws-sm:// and
    an ssm:// secret (moto's Secrets Manager and SSM, read on the driver's node with the forwarded credentials) and
    the forwarded AWS secret key (sealed) reach the driver and both Ray workers (the worker_process_setup_hook); the
    webhook's notification arrives though its URL travels sealed; Ray's job info (the list and each job's answer:
    entrypoint, runtime_env, metadata), `rtjob show`, the bucket's objects, the stored log, Ray's driver log and
    everything rtjob printed hold none of the values nor the webhook's URL; the script's print is masked. Queued
    (issue 44), the same holds with the queue's keeper in between: the keeper's own AWS credentials travel sealed,
    the run's sealed package is POSTed by the keeper, and the queue's objects in the bucket hold no value."""
    import hashlib

    secret_file = tmp_path / "file-token"
    secret_file.write_text(FILE_TOKEN + "\n")
    run_id = new_id("sealed")
    # In the session's moto server (which serves Secrets Manager and SSM at the storage's endpoint, which the job
    # gets): the companion resolves them on the driver's node with the forwarded credentials.
    s3.client(service="secretsmanager").create_secret(Name=f"team/{run_id}", SecretString=json.dumps({"token": SM_TOKEN}))
    s3.client(service="ssm").put_parameter(Name=f"/team/{run_id}", Value=SSM_TOKEN, Type="SecureString")
    (project / "sealed.py").write_text(SECRET_SCRIPT)
    (project / "jobs" / "sealed.yaml").write_text(
        "name: sealed\nentrypoint: python sealed.py\nworking_dir: ..\nrequirements: []\n"
        f"secrets:\n  ENV_TOK: env:SEALED_SOURCE\n  FILE_TOK: file://{secret_file}\n"
        f"  SM_TOK: aws-sm://team/{run_id}#token\n  SSM_TOK: ssm://team/{run_id}\n"
        "notify:\n  on: [succeeded]\n  targets:\n    - type: webhook\n      url: {env: SIDE_HOOK}\n")
    folder = f"runs/sealed/{run_id}"
    proc = rtjob("submit", "sealed", "--storage", f"s3://{BUCKET}/runs", "--forward-aws-credentials",
                 *(["--queue", QUEUE] if queued else []), "--submission-id", run_id,
                 env={**env, "SEALED_SOURCE": SEALED_TOKEN}, cwd=project, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digest = {n: hashlib.sha256(v.encode()).hexdigest()[:16] for n, v in (
        ("ENV_TOK", SEALED_TOKEN), ("FILE_TOK", FILE_TOKEN), ("SM_TOK", SM_TOKEN), ("SSM_TOK", SSM_TOKEN),
        ("AWS_SECRET_ACCESS_KEY", s3.secret_key))}
    done = wait_for(lambda: (r := record(s3, folder)) and r.get("completed_by") and r, 120, "the companion's end")
    assert done["status"] == "SUCCEEDED", done
    log = body(s3, f"{folder}/logs/driver.log").decode()
    [driver] = [json.loads(line[len("driver "):]) for line in log.splitlines() if line.startswith("driver ")]
    [workers] = [json.loads(line[len("workers "):]) for line in log.splitlines() if line.startswith("workers ")]
    assert driver == digest and workers == [digest, digest], (driver, workers)
    assert "printing my token **** and ****" in log

    [message] = wait_for(lambda: receiver.for_run(run_id), 60, "the webhook")  # its URL travelled sealed
    assert message["outcome"] == "succeeded"
    info = _ray_job_info(jobs_api, run_id)
    assert len(info) >= 2  # the list and the run's own answer (and its supervisor's, when one started)
    shown = rtjob("show", run_id, "-o", "json", env=env, cwd=project, timeout=120)
    assert shown.returncode == 0, shown.stderr
    stored = {key: body(s3, key) for key in keys(s3, "")  # the bucket's objects (the module's other runs aside)
              if not key.startswith("runs/side/")}
    assert any(run_id in key for key in stored), sorted(stored)
    logs = rtjob("logs", run_id, env=env, cwd=project, timeout=120)
    assert logs.returncode == 0 and "printing my token **** and ****" in logs.stdout, logs.stderr
    address, headers = jobs_api  # the drivers' job table in Ray's GCS (each driver's job config), as its state API
    gcs_jobs = requests.get(f"{address}/api/v0/jobs?detail=1&limit=1000", headers=headers, timeout=60)
    assert gcs_jobs.status_code == 200 and run_id in gcs_jobs.text, gcs_jobs.text[-2000:]
    ledger = b"".join(f.read_bytes() for f in Path(env["RTJOB_HOME"]).glob("ledger.sqlite3*"))  # its WAL too
    assert run_id.encode() in ledger  # the run's row is there to be read
    texts = {**info, "Ray's driver log": driver_log(jobs_api, run_id), "rtjob show": shown.stdout,
             "the stored log": log + parts(s3, folder, run_id).decode(), "submit's output": proc.stdout + proc.stderr,
             "rtjob logs": logs.stdout, "Ray's GCS job table": gcs_jobs.text,
             "this machine's ledger": ledger.decode(errors="replace"),
             **{f"s3://{BUCKET}/{key}": data.decode(errors="replace") for key, data in stored.items()}}
    values = {"the env: secret": SEALED_TOKEN, "the file:// secret": FILE_TOKEN, "the aws-sm:// secret": SM_TOKEN,
              "the ssm:// secret": SSM_TOKEN, "the S3 secret key": s3.secret_key,
              "the webhook's secret": HOOK_SECRET, "the webhook's URL": env["SIDE_HOOK"]}
    for what, text in texts.items():
        for name, value in values.items():
            at = text.find(value)
            assert at < 0, f"{what} holds {name}: ...{text[max(0, at - 300):at].replace(value, '<value>')}<value>..."
    assert "secret_env.setup" in info["Ray's job list"]  # what Ray's job info shows: the hook's module path
    sent = json.loads(info[f"Ray's job info of {run_id}"])["runtime_env"]
    assert not {"ENV_TOK", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "SIDE_HOOK"} & set(sent["env_vars"])
    assert all(uri.startswith("gcs://_ray_pkg_") for uri in sent["py_modules"])  # the sealed one among them
    if queued:
        [keeper] = [k for k in info if "rtjob-keeper-" in k and k.startswith("Ray's job info")]
        assert "AWS_SECRET_ACCESS_KEY" not in json.loads(info[keeper])["runtime_env"]["env_vars"]
        assert f"runs/queues/{QUEUE}/queue-state.json" in stored, sorted(stored)  # the queue's objects were read
        address, headers = jobs_api
        requests.post(f"{address}/api/jobs/{keeper.rsplit(' ', 1)[-1]}/stop", headers=headers, timeout=30)


def test_a_printed_forwarded_key_is_masked_in_rays_driver_log_with_no_secrets_entry(env, s3, project, jobs_api):
    """Issue 45: a job with no `secrets:` but --forward-aws-credentials and a webhook whose script prints the key and
    the URL (a debugging `print(os.environ)` does): its output is relayed through the redactor, which knows the
    sealed variables, so Ray's own driver log, the stored log and `rtjob logs` show `****` (the relay ran only for
    resolved `secrets:` values, and Ray's driver log held the key)."""
    (project / "printer.py").write_text('import os\nprint("key", os.environ["AWS_SECRET_ACCESS_KEY"], "hook",'
                                        ' os.environ["PRINTED_HOOK"], flush=True)\n')
    (project / "jobs" / "printer.yaml").write_text(
        "name: printer\nentrypoint: python printer.py\nworking_dir: ..\nrequirements: []\n"
        "notify:\n  on: [failed]\n  targets:\n    - type: webhook\n      url: {env: PRINTED_HOOK}\n")
    run_id = new_id("printer")
    hook = env["SIDE_HOOK"]
    proc = rtjob("submit", "printer", "--storage", f"s3://{BUCKET}/runs", "--forward-aws-credentials",
                 "--submission-id", run_id, env={**env, "PRINTED_HOOK": hook}, cwd=project, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = f"runs/printer/{run_id}"
    done = wait_for(lambda: (r := record(s3, folder)) and r.get("completed_by") and r, 120, "the companion's end")
    assert done["status"] == "SUCCEEDED", done
    logs = rtjob("logs", run_id, env=env, cwd=project, timeout=120)
    texts = {"Ray's driver log": driver_log(jobs_api, run_id), "the stored log": parts(s3, folder, run_id).decode(),
             "rtjob logs": logs.stdout, "submit's output": proc.stdout + proc.stderr}
    assert "key **** hook ****" in texts["Ray's driver log"], texts["Ray's driver log"][-2000:]
    for what, text in texts.items():
        assert s3.secret_key not in text and HOOK_SECRET not in text, what


def test_a_secret_the_node_cannot_read_fails_the_run_before_its_script_with_one_line_everywhere(env, project, s3):
    """Issue 45: a `file://` secret missing on the driver's node: the run fails before its script starts (exit 1),
    and `submit`'s end, `status`, `rtjob logs` and the run's record in its storage (the companion's end) each say
    which reference and why, in one line."""
    (project / "never.py").write_text('print("the script ran", flush=True)\n')
    (project / "jobs" / "never.yaml").write_text(
        "name: never\nentrypoint: python never.py\nworking_dir: ..\nrequirements: []\n"
        "secrets:\n  GONE_TOK: file:///nonexistent/rtjob-gone-token\n")
    run_id = new_id("never")
    proc = rtjob("submit", "never", "--storage", f"s3://{BUCKET}/runs", "--forward-aws-credentials",
                 "--submission-id", run_id, env=env, cwd=project, timeout=240)
    why = "secrets.GONE_TOK: file:///nonexistent/rtjob-gone-token could not be resolved: not found on the driver's node"
    assert proc.returncode == 1 and why in proc.stderr, proc.stderr[-3000:]
    stored = record(s3, f"runs/never/{run_id}")
    assert stored and stored["status"] == "FAILED" and stored["completed_by"] == "companion", stored
    assert why in stored["message"] and "\n" not in stored["message"], stored["message"]
    status = rtjob("status", run_id, "-o", "json", env=env, cwd=project, timeout=120)
    assert json.loads(status.stdout)["status"] == "FAILED" and why in json.loads(status.stdout)["message"], status
    logs = rtjob("logs", run_id, env=env, cwd=project, timeout=120)
    assert logs.returncode == 0 and why in logs.stdout and "the script ran" not in logs.stdout, logs.stdout
