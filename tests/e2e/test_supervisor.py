"""The supervisor on the cluster (rtjob.runside.supervisor), for real on the session's 2-node embedded cluster: a
`--no-wait` run with max_retries 1 whose driver is SIGKILLed once ends SUCCEEDED on <id>-retry1 with no rtjob
process alive (the supervisor, a Ray job of its own, retried it through the cluster's own Jobs API, token auth on),
and with s3 storage the retry resumes from the run's own checkpoint file and replaces attempt 1's files (the bucket,
`results` and `pull` have the retry's rows; each attempt's log is archived and read back with `logs --attempt N`,
also from a fresh client with no cluster address, whose `runs --storage`, `status`, `show` and `rtjob ui` (list,
page, API) say one verdict: status, reason, line, attempts, duration; no node folder is left); a file:// secret
rotated between the attempts reaches the retry as its new value (resolved again on the cluster); with a client
following as well there is still exactly one retry. Observed through the Jobs API and storage only until
everything is asserted; rtjob commands come after."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
from pathlib import Path

import pytest
from rtjob.core import clock
from rtjob.core.model import stamp
from support.agree import views
from support.cli import base_env, new_id, popen_rtjob, rtjob
from support.ray_jobs import JobsAPI, concurrent_status, ended, supervisor_pids, wait_for
from support.s3_server import S3Server, bucket_fixture

pytestmark = pytest.mark.cluster

BUCKET = "rtjob-supervised"
s3 = bucket_fixture(BUCKET)
# count.py: 60 lines, 0.25 s apart: long enough to be killed mid-run, a 15 s retry.
COUNT = ["tests/support/jobs/count.yaml", "--set", "max_retries=1", "--set", "args.lines=60", "--set", "args.interval=0.25"]


def entrypoint_pids(run_id: str) -> list[int]:
    """The job's own entrypoint (`python count.py`, under the companion) of ``run_id``: found in /proc by its
    command line and the run's RTJOB_RUN_NAME (other runs and clusters are never touched)."""
    marker = f"RTJOB_RUN_NAME={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if cmdline.startswith("python count.py") and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_the_first_attempts_driver(api: JobsAPI, run_id: str) -> None:
    """SIGKILL the first attempt's entrypoint once it prints (the retry, the same run name, is not there yet)."""
    wait_for(lambda: "line 3 of" in api.logs(run_id), 120, f"{run_id} to print")
    assert api.job(f"{run_id}-retry1") is None
    pids = entrypoint_pids(run_id)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)


def metrics_rows(s3: S3Server, folder: str) -> list[int]:
    client = s3.client()
    try:
        body = client.get_object(Bucket=BUCKET, Key=f"{folder}/metrics.json")["Body"].read()
    except client.exceptions.NoSuchKey:
        return []
    return [row["epoch"] for row in json.loads(body)]


def node_folder(run_id: str) -> Path:
    """The run's node folder on the driver's node (this machine: the embedded cluster's nodes run here)."""
    from rtjob.storage.node_dirs import run_folder

    return Path(run_folder(run_id))


def test_a_no_wait_run_is_retried_by_its_supervisor_with_no_client_alive(cluster_env, s3: S3Server,
                                                                          tmp_path: Path) -> None:
    env = {**cluster_env, **s3.env()}
    api = JobsAPI(env)
    run_id = new_id("sup")
    supervisor, retry = f"{run_id}-supervisor", f"{run_id}-retry1"
    folder = f"runs/count/{run_id}"
    # An object no attempt of the run writes, there before it: the script's summary.txt never overwrites it.
    s3.client().put_object(Bucket=BUCKET, Key=f"{folder}/summary.txt", Body=b"someone else's")
    # A file:// secret, rotated between the attempts: the retry resolves it again on the cluster (issue 45).
    token = tmp_path / "count-token"
    token.write_text("first-value-7d1c\n")
    # An "epoch" every 20 lines (5 s): metrics.json and checkpoint.json in RTJOB_RUN_DIR, synced to the bucket.
    submit = rtjob("submit", *COUNT, "--set", "args.epoch_every=20", "--env", "RTJOB_COMPANION_INTERVAL_S=1",
                   "--set", f"secrets.COUNT_TOKEN=file://{token}",
                   "--storage", f"s3://{BUCKET}/runs", "--forward-aws-credentials",
                   "--submission-id", run_id, "--no-wait", env=env, timeout=180)
    assert submit.returncode == 0, submit.stderr[-3000:]
    # The client has exited: what follows is carried on the cluster.
    data = api.job(supervisor)
    assert data is not None, submit.stderr
    assert data["metadata"]["rtjob.role"] == "supervisor" and data["metadata"]["rtjob.supervises"] == run_id
    assert not data.get("entrypoint_num_cpus")  # 0 CPUs (the Jobs API leaves a 0 out)
    run = api.job(run_id)
    assert run is not None
    # The supervisor keeps the run's packages alive: it references the very URIs a retry reuses.
    assert data["runtime_env"]["working_dir"] == run["runtime_env"]["working_dir"]
    assert data["runtime_env"]["working_dir"].startswith("gcs://")
    assert data["runtime_env"]["py_modules"] == run["runtime_env"]["py_modules"]
    # The cluster wants a token, and the client gave the supervisor none: whatever it reads and submits, it
    # authenticated with the token the cluster's own processes carry.
    assert api.get("/api/jobs/", auth=False).status_code == 401
    assert api.token not in json.dumps(data) and "RAY_AUTH_TOKEN" not in data["runtime_env"]["env_vars"]

    # The first attempt's folders on its node: private to this user, one per run.
    run_dir = node_folder(run_id) / "run"
    wait_for(lambda: run_dir.is_dir(), 60, "the run's node folder")
    for path in (run_dir.parent.parent, run_dir.parent, run_dir):
        st = path.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700, path
    # Killed once epoch 1's metrics.json (and its checkpoint) are in the bucket, mid-epoch 2.
    wait_for(lambda: metrics_rows(s3, folder) == [1] and api.status(run_id) == "RUNNING", 120, "epoch 1 synced")
    pids = entrypoint_pids(run_id)
    assert len(pids) == 1 and api.job(retry) is None, pids
    token.write_text("rotated-value-e40b\n")
    os.kill(pids[0], signal.SIGKILL)
    assert wait_for(ended(api, retry), 180, f"{retry} to end") == "SUCCEEDED", api.logs(retry)[-3000:]
    assert wait_for(ended(api, supervisor), 60, "the supervisor to end") == "SUCCEEDED", api.logs(supervisor)
    first = api.job(run_id)
    assert first is not None and first["status"] == "FAILED" and first["driver_exit_code"] in (137, -9), first
    assert api.job(f"{run_id}-retry2") is None  # exactly one retry
    # The forwarded secret key travelled sealed: no job rtjob started for the run holds it (issue 45).
    held = json.dumps([api.job(job) for job in (run_id, supervisor, retry)])
    assert s3.secret_key not in held and "AWS_SECRET_ACCESS_KEY" not in held, "a job's info holds the forwarded key"
    log = api.logs(supervisor)
    assert f"retry 1/1: submitted {retry}" in log, log
    assert f"{retry} ended SUCCEEDED: the run has ended" in log, log
    assert "Unauthorized" not in log and "authentication failed" not in log, log
    # Its state in the run's record in storage: who carried the run, when it was last seen.
    body = s3.client().get_object(Bucket=BUCKET, Key=f"runs/count/{run_id}/rtjob-run.json")["Body"].read()
    record = json.loads(body)
    assert record["carried_by"] == "supervisor" and record["last_seen"], record
    assert record["status"] == "SUCCEEDED" and record["completed_by"] == "companion", record
    # The retry resumed from the run's checkpoint (seeded from the bucket) and its files replaced attempt 1's.
    first_log, retry_log = api.logs(run_id), api.logs(retry)
    digest = {v: hashlib.sha256(v.encode()).hexdigest()[:16] for v in ("first-value-7d1c", "rotated-value-e40b")}
    assert f"token sha256 {digest['first-value-7d1c']}" in first_log, first_log[:2000]
    assert f"token sha256 {digest['rotated-value-e40b']}" in retry_log, retry_log[:2000]  # resolved again
    # From the last checkpoint stored before the kill: epoch 1's (line 20), or epoch 2's (line 40) when the kill,
    # made once epoch 1 was in the bucket, came after line 40 on a loaded machine.
    resumed = re.search(r"resuming after line (\d+) \(its checkpoint\)", retry_log)
    assert "resuming" not in first_log and resumed and resumed.group(1) in ("20", "40"), retry_log[-2000:]
    at = int(resumed.group(1))
    assert f"line {at} of 60" in first_log and "line 1 of 60" not in retry_log and f"line {at + 1} of 60" in retry_log
    assert metrics_rows(s3, folder) == [1, 2, 3]
    assert record["metrics"]["last"]["epoch"] == 3, record["metrics"]
    assert [(a["id"], a["status"]) for a in record["attempts"]] == [(run_id, "FAILED"), (retry, "SUCCEEDED")]
    left = f"s3://{BUCKET}/{folder}/summary.txt is already there, not written by any attempt of this run: left as " \
           "it is (not overwritten)"
    assert record["sync_notes"] == [left] and left in retry_log, record["sync_notes"]
    body = s3.client().get_object(Bucket=BUCKET, Key=f"{folder}/summary.txt")["Body"].read()
    assert body == b"someone else's"
    stored = {item["Key"] for item in s3.client().list_objects_v2(Bucket=BUCKET, Prefix=folder)["Contents"]}
    assert {f"{folder}/logs/{run_id}.log", f"{folder}/logs/{retry}.log", f"{folder}/rtjob-sync/{run_id}.json",
            f"{folder}/rtjob-sync/{retry}.json"} <= stored, stored
    # Nothing left on the node: each attempt's folder removed once its end was synced.
    assert not node_folder(run_id).exists()

    # Asserted: now rtjob's own views. The supervisor is no run of the user's; status names it.
    listed = rtjob("list", "--output", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    # One story of the retried run in every command: one row, its final status, its attempts, one duration.
    assert run_id in rows and retry not in rows and supervisor not in rows, rows
    row = rows[run_id]
    assert row["status"] == "SUCCEEDED" and row["attempts"] == 2 and row["exit_code"] == 0, row
    failed = rtjob("list", "--status", "FAILED", "-o", "json", env=env)
    assert run_id not in {r["id"] for r in json.loads(failed.stdout)}, failed.stdout
    shown = rtjob("status", run_id, "--output", "json", env=env)
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["status"] == "SUCCEEDED" and status["message"] == row["message"], (status, row)
    assert (status["start_time"], status["end_time"]) == (row["start_time"], row["end_time"]), (status, row)
    assert status["carried_by"] == "supervisor", status
    assert status["supervisor"]["alive"] is False and status["supervisor"]["last_seen"] == record["last_seen"]
    text = rtjob("status", run_id, env=env).stdout
    assert f"carried by:  supervisor (succeeded, last seen {stamp(record['last_seen'])})" in text, text
    assert f"\nsync:        {left}" in text and status["sync_notes"] == [left], text
    runs = rtjob("runs", "--output", "json", env=env)
    assert runs.returncode == 0, runs.stderr
    assert supervisor not in runs.stdout
    remembered = [r for r in json.loads(runs.stdout) if r["id"].startswith(run_id)]
    assert [(r["id"], r["status"]) for r in remembered] == [(run_id, "SUCCEEDED")], remembered
    assert (remembered[0]["start_time"], remembered[0]["end_time"]) == (row["start_time"], row["end_time"])
    show = json.loads(rtjob("show", run_id, "-o", "json", env=env).stdout)
    assert show["status"] == "SUCCEEDED" and [a["status"] for a in show["attempts"]] == ["FAILED", "SUCCEEDED"]
    # results and pull: the latest state (the retry's rows).
    results = rtjob("results", run_id, "-o", "json", env=env)
    assert results.returncode == 0, results.stderr
    assert [r["epoch"] for r in json.loads(results.stdout)[0]["history"]] == [1, 2, 3]
    pulled = rtjob("pull", run_id, "--to", str(tmp_path / "pulled"), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert [r["epoch"] for r in json.loads((tmp_path / "pulled" / "metrics.json").read_text())] == [1, 2, 3]
    # Each attempt's log, from the cluster's client and from a fresh client with no cluster address (only the
    # bucket: the session's cluster cannot be taken down mid-session, so this client knows no cluster at all).
    fresh = {**base_env(tmp_path / "fresh-home"), **s3.env()}
    seen = views(run_id, f"s3://{BUCKET}/runs", fresh)  # `runs --storage`, `status`, `show`, the UI: one verdict
    for listed_ids in seen.listed.values():  # one row for the retried run in the team's list and the UI's
        assert [one for one in listed_ids if one.startswith(run_id)] == [run_id], seen.listed
    agreed = seen.agree()
    took = (clock.parse(record["end_time"]) - clock.parse(record["start_time"])).total_seconds()
    assert (agreed["status"], agreed["reason"], agreed["attempts"]) == ("SUCCEEDED", "completed", 2), agreed
    assert agreed["duration_s"] == round(took, 3) and agreed["end_time"] == stamp(row["end_time"]), (agreed, record)
    assert "embedded" not in seen.status_stderr, seen.status_stderr  # a teammate's run: no cluster of theirs blamed
    for client in (env, fresh):
        one = rtjob("logs", run_id, "--attempt", "1", env=client)
        two = rtjob("logs", run_id, "--attempt", "2", env=client)
        assert one.returncode == 0 and two.returncode == 0, (one.stderr, two.stderr)
        assert "line 20 of 60" in one.stdout and "resuming" not in one.stdout and "line 60 of 60" not in one.stdout
        assert f"resuming after line {at}" in two.stdout and "line 60 of 60" in two.stdout
        third = rtjob("logs", run_id, "--attempt", "3", env=client)
        assert third.returncode == 2 and "has 2 attempt(s)" in third.stderr, third.stderr


def test_a_followed_run_is_still_retried_exactly_once(cluster_env) -> None:
    """The client follower and the supervisor both see the killed driver and both go for <id>-retry1: one
    submits it, the other attaches (Ray refuses a second job with the same id)."""
    api = JobsAPI(cluster_env)
    run_id = new_id("supf")
    supervisor, retry = f"{run_id}-supervisor", f"{run_id}-retry1"
    follower = popen_rtjob("submit", *COUNT, "--submission-id", run_id, env=cluster_env)
    try:
        # Both watch the first attempt before it is killed: both will go for the retry.
        wait_for(lambda: api.job(supervisor) and f"carrying {run_id} (attempt {run_id})" in api.logs(supervisor),
                 120, "the supervisor to carry the run")
        kill_the_first_attempts_driver(api, run_id)
        out, err = follower.communicate(timeout=240)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err[-3000:]
    assert wait_for(ended(api, supervisor), 60, "the supervisor to end") == "SUCCEEDED", api.logs(supervisor)
    assert api.status(retry) == "SUCCEEDED" and api.job(f"{run_id}-retry2") is None
    log = api.logs(supervisor)
    by_supervisor = f"retry 1/1: submitted {retry}" in log
    by_client = f"retry 1/1: submitted {retry}" in err
    assert by_supervisor != by_client, (log, err[-3000:])  # exactly one of them submitted it
    if by_supervisor:
        assert f"retry 1/1: attaching to {retry}" in err, err[-3000:]
    else:
        assert f"retry 1/1: attached to {retry}" in log, log
    assert f"{retry} SUCCEEDED" in err


def test_a_retry_submitted_by_the_supervisor_and_clients_at_once_is_created_once(cluster_env, monkeypatch) -> None:
    """The race itself, forced: the supervisor's submit (REST) and the client's (Ray's own client, through the
    backend) send the same retry at the same moment from 6 threads: one creates it, every other attaches."""
    import threading

    from rtjob.backends import backend_class, configured
    from rtjob.backends.ray.client import RayJobsAPI
    from rtjob.backends.ray.in_cluster import submit_over_rest
    from rtjob.backends.ray.retries import RayRetries
    from support.cli import REPO

    api = JobsAPI(cluster_env)
    run_id = new_id("race")
    submit = rtjob("submit", "tests/support/jobs/count.yaml", "--set", "max_retries=1", "--set", "args.lines=1",
                   "--submission-id", run_id, "--no-wait", env=cluster_env, timeout=180)
    assert submit.returncode == 0, submit.stderr[-3000:]
    assert wait_for(ended(api, run_id), 120, f"{run_id} to end") == "SUCCEEDED"
    data = api.job(run_id)
    assert data is not None
    for name in ("RTJOB_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, cluster_env[name])
    rest = RayJobsAPI(api.address, {"Authorization": f"Bearer {api.token}"})
    as_supervisor = RayRetries(rest, lambda request: submit_over_rest(rest, request))
    client = backend_class("local")(configured({"backend": "local"}, REPO))
    as_client = client._retries()
    barrier = threading.Barrier(6)
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []

    def go(retries: RayRetries) -> None:
        try:
            barrier.wait(30)
            run, created = retries.resubmit(data, 2)
            results.append((run.id, created))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(r,)) for r in [as_supervisor, as_client] * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert sorted(results) == sorted([(f"{run_id}-retry1", False)] * 5 + [(f"{run_id}-retry1", True)]), results
    assert wait_for(ended(api, f"{run_id}-retry1"), 120, "the retry to end") == "SUCCEEDED"
    assert api.job(f"{run_id}-retry2") is None


def test_a_supervisor_killed_before_the_retry_is_replaced_by_status_repair_exactly_once(cluster_env) -> None:
    """The supervisor is SIGKILLed, then the driver: nothing retries the run; `rtjob status` says so and starts
    nothing; two `rtjob status --repair` at once start one new supervisor (<id>-supervisor-2), which submits the one retry."""
    api = JobsAPI(cluster_env)
    run_id = new_id("supk")
    first, second, retry = f"{run_id}-supervisor", f"{run_id}-supervisor-2", f"{run_id}-retry1"
    submit = rtjob("submit", *COUNT, "--submission-id", run_id, "--no-wait", env=cluster_env, timeout=180)
    assert submit.returncode == 0, submit.stderr[-3000:]
    wait_for(lambda: f"carrying {run_id} (attempt {run_id})" in api.logs(first), 120, "the supervisor to carry it")
    pids = supervisor_pids(run_id)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pids[0]}").exists(), 30, "the supervisor to be gone")
    kill_the_first_attempts_driver(api, run_id)
    assert wait_for(ended(api, run_id), 60, f"{run_id} to end") == "FAILED"
    assert wait_for(ended(api, first), 60, "the supervisor's job to end") == "FAILED"
    assert api.job(retry) is None  # nothing carries the run now

    looked = rtjob("status", run_id, env=cluster_env, timeout=120)  # looking starts nothing: it says what would
    assert looked.returncode == 0 and f"rtjob status {run_id} --repair" in looked.stderr, looked.stderr
    assert api.job(second) is None and api.job(retry) is None
    answers = concurrent_status(run_id, cluster_env, "--repair")
    assert wait_for(ended(api, retry), 180, f"{retry} to end") == "SUCCEEDED", api.logs(retry)[-3000:]
    assert wait_for(ended(api, second), 60, "the new supervisor to end") == "SUCCEEDED", api.logs(second)
    assert api.job(f"{run_id}-supervisor-3") is None and api.job(f"{run_id}-retry2") is None
    assert f"retry 1/1: submitted {retry}" in api.logs(second), api.logs(second)
    assert any(f"started supervisor {second}" in err for _, err in answers), answers


def test_a_stopped_run_is_not_retried_and_its_supervisor_ends(cluster_env) -> None:
    """`rtjob stop` (the stop marker, then Ray's stop) of a supervised `--no-wait` run: STOPPED, no retry, and the
    supervisor ends with the run."""
    api = JobsAPI(cluster_env)
    run_id = new_id("sups")
    supervisor = f"{run_id}-supervisor"
    submit = rtjob("submit", *COUNT, "--submission-id", run_id, "--no-wait", env=cluster_env, timeout=180)
    assert submit.returncode == 0, submit.stderr[-3000:]
    wait_for(lambda: f"carrying {run_id} (attempt {run_id})" in api.logs(supervisor), 120, "the supervisor")
    wait_for(lambda: "line 3 of" in api.logs(run_id), 120, f"{run_id} to print")
    stopped = rtjob("stop", run_id, env=cluster_env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert wait_for(ended(api, supervisor), 60, "the supervisor to end") == "SUCCEEDED", api.logs(supervisor)
    assert api.status(run_id) == "STOPPED" and api.job(f"{run_id}-retry1") is None
    assert f"{run_id} ended STOPPED: the run has ended" in api.logs(supervisor)
