"""The supervisor's decisions (its loop: runside/supervisor/loop.py, on Ray's primitives: backends/ray/in_cluster.py;
its jobs: supervisor_jobs.py), over an in-memory Jobs API: the request that keeps the
run's packages alive, one retry of a lost driver, none after a stop or for an ordinary failure, the retry it just
submitted stopped when the stop marker appeared meanwhile, a missing package named in one line. The real cluster:
tests/e2e/test_supervisor.py."""

from __future__ import annotations

from typing import Any

import pytest
from rtjob.backends.ray.in_cluster import RayClusterJobs
from rtjob.backends.ray.request import RayJobRequest
from rtjob.backends.ray.supervisor_jobs import is_supervisor, supervisor_request, wants_supervisor
from rtjob.core.model import RunInfo, RunStatus, SubmitResult
from rtjob.runside.supervisor.loop import SupervisedRun, Supervisor

import rtjob_contract as contract

RUN = "t-run-1"
RUNTIME_ENV: dict[str, Any] = {"working_dir": "gcs://_ray_pkg_wd.zip", "py_modules": ["gcs://_ray_pkg_rtjob.zip", "gcs://_ray_pkg_c.zip"],
               "pip": ["numpy"], "env_vars": {contract.ENV_RUN_URI: "s3://b/runs/count/t-run-1",
                                              contract.ENV_COMPANION: "1", "AWS_ACCESS_KEY_ID": "AKIAX"}}


def job(run_id: str, status: str, code: int | None, **meta: str) -> dict[str, Any]:
    return {"submission_id": run_id, "status": status, "driver_exit_code": code, "error_type": None, "message": "",
            "entrypoint": "python -m rtjob.runside.companion 'python count.py'", "runtime_env": RUNTIME_ENV,
            "metadata": {contract.META_MAX_RETRIES: "1", contract.META_JOB: "count", **meta}}


class Response:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class JobsAPI:
    """The Jobs API's answers the supervisor reads, in memory."""

    address = "http://head:8265"

    def __init__(self, *jobs: dict[str, Any], packages: set[str] | None = None) -> None:
        self.jobs = {j["submission_id"]: j for j in jobs}
        self.packages = packages if packages is not None else {"_ray_pkg_wd.zip", "_ray_pkg_rtjob.zip", "_ray_pkg_c.zip"}
        self.stopped: list[str] = []

    def job(self, run_id: str) -> dict[str, Any] | None:
        return self.jobs.get(run_id)

    def request(self, method: str, path: str, **_: Any) -> Response:
        assert method == "GET" and path.startswith("/api/packages/gcs/")
        return Response(200 if path.rsplit("/", 1)[1] in self.packages else 404)

    def stop(self, run_id: str) -> bool:
        self.stopped.append(run_id)
        return True


class Harness:
    def __init__(self, api: JobsAPI, stops: list[bool] | None = None) -> None:
        self.api = api
        self.stops = list(stops or [])
        self.lines: list[str] = []
        self.beats: list[str | None] = []
        self.sent: list[RayJobRequest] = []

    def submit(self, request: RayJobRequest) -> SubmitResult:
        self.sent.append(request)
        created = request.run_id not in self.api.jobs
        self.api.jobs.setdefault(request.run_id, job(request.run_id, "SUCCEEDED", 0, **request.metadata))
        return SubmitResult(RunInfo(request.run_id, "count", "ray", RunStatus.PENDING), created)

    def supervisor(self) -> Supervisor:
        self.gave_up: list[str] = []
        self.retried: list[tuple[str, str, int, str]] = []
        self.run = SupervisedRun(stop_requested=lambda: self.stops.pop(0) if self.stops else False,
                                 beat=self.beats.append, say=self.lines.append, gave_up=self.gave_up.append,
                                 retrying=lambda *told: self.retried.append(told))
        return Supervisor(RayClusterJobs(self.api, submit=self.submit))  # type: ignore[arg-type]

    def carry(self) -> int:
        return self.supervisor().carry_run(RUN, self.run)


def test_the_supervisors_request_references_the_runs_packages_and_needs_no_cpu() -> None:
    request = supervisor_request(job(RUN, "PENDING", None), "http://10.0.0.1:8265")
    assert request.run_id == f"{RUN}-supervisor" and request.entrypoint_num_cpus == 0
    assert request.entrypoint == f"python -m rtjob.runside.supervisor {RUN} ray"
    env = request.runtime_env
    assert env["working_dir"] == RUNTIME_ENV["working_dir"] and env["py_modules"] == RUNTIME_ENV["py_modules"]
    assert "pip" not in env  # it needs none of the run's requirements
    assert env["env_vars"][contract.ENV_DASHBOARD_ADDRESS] == "http://10.0.0.1:8265"
    assert env["env_vars"][contract.ENV_RUN_URI] == RUNTIME_ENV["env_vars"][contract.ENV_RUN_URI]
    assert contract.ENV_COMPANION not in env["env_vars"]
    assert request.metadata[contract.META_ROLE] == contract.ROLE_SUPERVISOR
    assert request.metadata[contract.META_SUPERVISES] == RUN
    as_listed = {"metadata": request.metadata}
    assert is_supervisor(as_listed) and not wants_supervisor(as_listed)
    assert wants_supervisor(job(RUN, "RUNNING", None))
    assert not wants_supervisor({**job(RUN, "RUNNING", None), "metadata": {}})


def test_a_lost_driver_is_retried_once_and_the_supervisor_ends_with_the_run() -> None:
    h = Harness(JobsAPI(job(RUN, "FAILED", 137)))
    assert h.carry() == 0
    assert [r.run_id for r in h.sent] == [f"{RUN}-retry1"]
    sent = h.sent[0]
    assert sent.runtime_env == RUNTIME_ENV  # the failed attempt's packages, as Ray returned them
    assert sent.metadata[contract.META_ATTEMPT] == "2" and sent.metadata[contract.META_PARENT] == RUN
    assert any("retry 1/1: submitted t-run-1-retry1" in line for line in h.lines), h.lines
    assert h.beats[0] == RUN and h.beats[-1] is None
    assert h.retried == [(RUN, "its driver was killed by SIGKILL (exit code 137)", 1, f"{RUN}-retry1")]


def test_a_retry_another_submitted_first_is_attached_to_and_not_told_again() -> None:
    h = Harness(JobsAPI(job(RUN, "FAILED", 137)))
    h.api.jobs[f"{RUN}-retry1"] = {**job(f"{RUN}-retry1", "SUCCEEDED", 0), "submission_id": f"{RUN}-retry1"}
    supervisor = h.supervisor()
    supervisor.jobs.latest_attempt = lambda run_id: RUN  # type: ignore[method-assign]  # it saw the first attempt end first
    assert supervisor.carry_run(RUN, h.run) == 0
    assert supervisor.submitted == [] and h.retried == []
    assert any(f"retry 1/1: attached to {RUN}-retry1" in line for line in h.lines), h.lines


def test_a_run_retried_already_is_carried_from_its_latest_attempt() -> None:
    h = Harness(JobsAPI(job(RUN, "FAILED", 137),
                        job(f"{RUN}-retry1", "SUCCEEDED", 0, **{contract.META_ATTEMPT: "2", contract.META_PARENT: RUN})))
    assert h.carry() == 0
    assert h.sent == [] and h.beats[0] == f"{RUN}-retry1"


@pytest.mark.parametrize("code", [1, 139])  # an ordinary failure, a crash by SIGSEGV
def test_what_a_retry_would_repeat_is_not_retried(code: int) -> None:
    h = Harness(JobsAPI(job(RUN, "FAILED", code)))
    assert h.carry() == 0 and h.sent == []


def test_no_retry_after_a_stop_was_requested() -> None:
    h = Harness(JobsAPI(job(RUN, "FAILED", 143)), stops=[True])
    assert h.carry() == 0
    assert h.sent == [] and any("not retried: the run's stop was requested" in line for line in h.lines)


def test_a_stop_requested_while_it_submitted_stops_the_retry() -> None:
    api = JobsAPI(job(RUN, "FAILED", 137))
    h = Harness(api, stops=[False, True])
    h.carry()
    assert [r.run_id for r in h.sent] == [f"{RUN}-retry1"] and api.stopped == [f"{RUN}-retry1"]


def test_a_missing_package_is_named_and_nothing_is_retried() -> None:
    h = Harness(JobsAPI(job(RUN, "FAILED", 137), packages={"_ray_pkg_rtjob.zip", "_ray_pkg_c.zip"}))
    assert h.carry() == 0
    assert h.sent == []
    assert any("no longer has the run's code (gcs://_ray_pkg_wd.zip)" in line for line in h.lines), h.lines
    assert h.gave_up == [f"cannot retry {RUN}: the cluster no longer has the run's code (gcs://_ray_pkg_wd.zip)"]


@pytest.mark.parametrize("supervisor,attempt,code,wanted", [
    ("RUNNING", "RUNNING", None, False),  # alive: it carries the run
    ("FAILED", "RUNNING", None, True),  # died while the run goes on
    ("FAILED", "FAILED", 137, True),  # died before it retried a lost driver
    ("FAILED", "FAILED", 1, False),  # nothing left to carry: an ordinary failure is the run's end
    ("SUCCEEDED", "SUCCEEDED", 0, False),
])
def test_a_dead_supervisor_is_replaced_only_while_the_run_has_something_to_carry(
        supervisor: str, attempt: str, code: int | None, wanted: bool) -> None:
    from rtjob.backends.ray.supervisor_jobs import latest_supervisor, needs_new_supervisor, supervisor_id

    api = JobsAPI(job(RUN, attempt, code), {"submission_id": supervisor_id(RUN), "status": supervisor, "metadata": {
        contract.META_ROLE: contract.ROLE_SUPERVISOR, contract.META_SUPERVISES: RUN}})
    n, latest = latest_supervisor(api, RUN)
    assert n == 1 and latest is not None
    assert needs_new_supervisor(api, RUN, latest) is wanted
    assert supervisor_id(RUN, 2) == f"{RUN}-supervisor-2"
    # A job that merely has the id is not the run's supervisor (one that is not rtjob's, or another run's).
    api.jobs[supervisor_id(RUN)]["metadata"] = {contract.META_ROLE: contract.ROLE_SUPERVISOR,
                                                contract.META_SUPERVISES: "another-run"}
    assert latest_supervisor(api, RUN) == (0, None)


def test_the_run_side_keeps_the_supervisors_state_in_the_runs_record(tmp_path) -> None:
    """rtjob.runside.supervisor's run folder on a real (local) one: the heartbeat names the supervisor, the
    stop marker is seen, a run it gave up on is FAILED with the line; the companion keeps carried_by."""
    from rtjob.runside.supervisor.run_folder import RunFolder
    from rtjob.storage.records import read_record

    side = RunFolder(RUN, str(tmp_path))
    assert side.stop_requested() is False
    side.beat(RUN)
    record = read_record(str(tmp_path), None)
    assert record is not None and record.carried_by == "supervisor" and record.last_seen
    (tmp_path / contract.STOP_MARKER_FILE).write_text("now")
    assert side.stop_requested() is True
    side.gave_up("cannot retry t-run-1: the cluster no longer has the run's code (gcs://x.zip)")
    record = read_record(str(tmp_path), None)
    assert record is not None and record.status == "FAILED" and record.message.startswith("cannot retry")
    assert record.carried_by == "supervisor"


def test_a_retry_the_supervisor_submits_is_told_once(tmp_path, monkeypatch) -> None:
    """`notify: on: [retrying]`: the supervisor's retry reaches a loopback webhook once, however often it is told
    (the rtjob-notified-retrying-N marker in the run's folder, as a client that submits one claims it)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from rtjob.runside.supervisor.run_folder import RunFolder

    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv(contract.ENV_NOTIFY, json.dumps({"on": ["retrying"], "steps": False,
                                                            "targets": [{"type": "webhook", "env": "HOOK_URL"}]}))
        monkeypatch.setenv("HOOK_URL", f"http://127.0.0.1:{server.server_address[1]}/hook")
        monkeypatch.setenv(contract.ENV_JOB_NAME, "count")
        side = RunFolder(RUN, str(tmp_path))
        for _ in range(2):
            side.retrying(RUN, "its driver was killed by SIGKILL (exit code 137)", 1, f"{RUN}-retry1")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert len(got) == 1, got
    text = json.dumps(got[0])
    assert RUN in text and "retrying" in text and f"{RUN}-retry1" in text and "SIGKILL" in text
    assert (tmp_path / contract.notified_marker("retrying-2")).exists()


@pytest.mark.parametrize(("pipeline_step", "told"), [(False, ["failed"]), (True, [])])
def test_a_run_the_supervisor_gives_up_on_is_told_failed_once(tmp_path, monkeypatch, receiver, pipeline_step: bool,
                                                              told: list[str]) -> None:
    """A retry that cannot be made (its code is gone) ends the run FAILED; its last attempt's companion left
    `failed` untold (a retry was due), so the supervisor tells it, once; a pipeline's step only with notify.steps
    (the pipeline's supervisor sends the pipeline's one message)."""
    import json

    from rtjob.core.record import RunRecord
    from rtjob.runside.supervisor.run_folder import RunFolder
    from support.planted import plant_record

    monkeypatch.setenv(contract.ENV_NOTIFY, json.dumps({"on": ["failed"], "steps": False,
                                                        "targets": [{"type": "webhook", "env": "HOOK_URL"}]}))
    monkeypatch.setenv("HOOK_URL", receiver.url("/hook"))
    if pipeline_step:
        monkeypatch.setenv(contract.ENV_PIPELINE_ID, "t-pipe")
    plant_record(str(tmp_path), RunRecord(id=RUN, job="count", backend="local", storage_uri=str(tmp_path),
                                          status="FAILED"), None)
    side = RunFolder(RUN, str(tmp_path))
    for _ in range(2):
        side.gave_up("cannot retry t-run-1: the cluster no longer has the run's code (gcs://x.zip)")
    assert [(b["run_id"], b["outcome"]) for b in receiver.bodies("/hook")] == [(RUN, o) for o in told]
    if told:
        assert receiver.bodies("/hook")[0]["error"].startswith("cannot retry")  # type: ignore[index]


def _supervisors(api: JobsAPI, n: int, status: str = "FAILED") -> None:
    from rtjob.backends.ray.supervisor_jobs import supervisor_id

    for i in range(1, n + 1):
        api.jobs[supervisor_id(RUN, i)] = {"submission_id": supervisor_id(RUN, i), "status": status if i < n else
                                           "RUNNING", "metadata": {contract.META_ROLE: contract.ROLE_SUPERVISOR,
                                                                   contract.META_SUPERVISES: RUN}}


@pytest.mark.parametrize("attempt", ["FAILED", "RUNNING"])
def test_a_supervisor_that_keeps_dying_is_given_up_after_three_replacements(attempt: str) -> None:
    """The fifth supervisor (the fourth replacement) retries nothing: the attempt stopped if it runs, the run
    given up FAILED with one line; then no client starts another."""
    from rtjob.backends.ray.supervisor_jobs import (
        GIVING_UP,
        latest_supervisor,
        needs_new_supervisor,
        supervisor_id,
    )

    api = JobsAPI(job(RUN, attempt, 137 if attempt == "FAILED" else None))
    _supervisors(api, GIVING_UP)
    h = Harness(api)
    api.stop = lambda run_id: (api.stopped.append(run_id), api.jobs[run_id].update(status="FAILED"))[0] is None
    assert h.carry() == 1
    assert h.sent == [] and api.stopped == ([RUN] if attempt == "RUNNING" else [])
    assert h.gave_up == [f"its supervisor died 4 times ({supervisor_id(RUN, 4)} was the last): rtjob gave the run "
                         "up after 3 replacements"]
    api.jobs[supervisor_id(RUN, GIVING_UP)]["status"] = "FAILED"
    n, latest = latest_supervisor(api, RUN)
    assert n == GIVING_UP and not needs_new_supervisor(api, RUN, latest)


def test_the_last_replacement_still_carries_the_run() -> None:
    from rtjob.backends.ray.supervisor_jobs import GIVING_UP

    api = JobsAPI(job(RUN, "FAILED", 137))
    _supervisors(api, GIVING_UP - 1)
    h = Harness(api)
    assert h.carry() == 0
    assert [r.run_id for r in h.sent] == [f"{RUN}-retry1"] and h.gave_up == []


def test_the_supervisors_own_log_is_archived_with_the_run_masked(tmp_path) -> None:
    """rtjob.runside.supervisor's last act, in a real process whose stdout is a file (as Ray's driver log is): its
    own log beside the run's, its secrets masked, listed in the run's record."""
    import json
    import subprocess
    import sys

    from support.cli import REPO

    folder = tmp_path / "count" / RUN
    folder.mkdir(parents=True)
    out = tmp_path / "driver.log"
    code = ("from rtjob.runside.supervisor.run_folder import RunFolder, say\n"
            f"side = RunFolder({RUN!r}, {str(folder)!r})\n"
            "side.beat(None)\n"
            "say('retry 1/1: submitted t-run-1-retry1 with AKIAsecretvalue1234')\n"
            "side.archive_own_log()\n")
    env = {"PYTHONPATH": f"{REPO / 'cli'}:{REPO}", "PATH": "/usr/bin:/bin", "AWS_SECRET_ACCESS_KEY": "AKIAsecretvalue1234",
           "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": {"job_submission_id": f"{RUN}-supervisor-2"}})}
    with out.open("wb") as stdout:
        subprocess.run([sys.executable, "-c", code], stdout=stdout, env=env, check=True, timeout=60)
    archived = (folder / "logs" / f"{RUN}-supervisor-2.log").read_text()
    assert "retry 1/1: submitted t-run-1-retry1" in archived and "AKIAsecretvalue1234" not in archived
    record = json.loads((folder / "rtjob-run.json").read_text())
    assert record["logs"] == [f"logs/{RUN}-supervisor-2.log"] and record["carried_by"] == "supervisor"
