"""The supervisor's loop carrying a pipeline (runside/supervisor/loop.py, on backends/ray/in_cluster.py; its jobs:
supervisor_jobs.py): which step it
carries next given the steps' states; the request that carries every step's request and keeps every step's package
alive; which supervisor replaces a dead one, and the one that gives the pipeline up after MAX_REPLACEMENTS; whose end
notifies (notify/). The real cluster: tests/e2e/test_pipeline_supervisor.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rtjob.backends.ray.supervisor_jobs import pipeline_supervisor_request, renewed_if_dead, steps_of
from rtjob.notify import NotifyConfig, Target, run_end_notifies
from rtjob.runside.supervisor.loop import next_step

import rtjob_contract as contract

PID = "t-pipe-1"


def body(step: str, working_dir: str, *modules: str) -> dict[str, Any]:
    return {"submission_id": f"{PID}-{step}", "entrypoint": f"python -m rtjob.runside.companion 'python {step}.py'",
            "runtime_env": {"working_dir": working_dir, "py_modules": list(modules),
                            "env_vars": {contract.ENV_RUN_NAME: f"{PID}-{step}", contract.ENV_STEP_NAME: step,
                                         "AWS_ACCESS_KEY_ID": "AKIAX", contract.ENV_NOTIFY: "{}",
                                         contract.ENV_TIME_LIMIT_S: "600", contract.ENV_COMPANION: "1"}},
            "metadata": {contract.META_STORAGE: f"s3://b/runs/p-{step}/{PID}-{step}"}, "entrypoint_num_cpus": 0,
            "job_file": "jobs/p.yaml"}


@pytest.mark.parametrize(("statuses", "stop", "carried"), [
    ([None, None], False, 0),  # nothing ran yet: the first step
    (["RUNNING", None], False, 0),  # a step that runs is carried on (attached to)
    (["SUCCEEDED", None], False, 1),  # the next step only after the one before SUCCEEDED
    (["SUCCEEDED", "PENDING"], False, 1),
    (["FAILED", None], False, None),  # a step that did not succeed (after its retries) ends the pipeline
    (["STOPPED", None], False, None),
    (["SUCCEEDED", "SUCCEEDED"], False, None),  # all done
    (["SUCCEEDED", None], True, None),  # a stop: no later step
    ([None, None], True, None),
])
def test_the_step_carried_next(statuses: list[str | None], stop: bool, carried: int | None) -> None:
    assert next_step(statuses, stop) == carried


def test_the_supervisor_request_carries_every_step_and_references_every_package() -> None:
    steps = [body("a", "gcs://_ray_pkg_wd.zip", "gcs://_ray_pkg_rtjob.zip"),
             body("b", "gcs://_ray_pkg_other.zip", "gcs://_ray_pkg_rtjob.zip")]
    request = pipeline_supervisor_request(PID, f"s3://b/runs/p/{PID}", "p", steps, "http://head:8265")
    assert request.submission_id == f"{PID}-supervisor" and request.entrypoint_num_cpus == 0
    assert request.entrypoint == f"python -m rtjob.runside.supervisor {PID} ray"
    # Ray keeps a package while a job references it: the supervisor references the packages of every step.
    assert request.runtime_env["working_dir"] == "gcs://_ray_pkg_wd.zip"
    assert request.runtime_env["py_modules"] == ["gcs://_ray_pkg_rtjob.zip", "gcs://_ray_pkg_other.zip"]
    env = request.runtime_env["env_vars"]
    assert json.loads(env[contract.ENV_PIPELINE_STEPS]) == steps
    assert env[contract.ENV_RUN_URI] == f"s3://b/runs/p/{PID}" and env[contract.ENV_PIPELINE_ID] == PID
    assert env["AWS_ACCESS_KEY_ID"] == "AKIAX" and contract.ENV_NOTIFY in env  # the record's and the message's
    assert contract.ENV_RUN_NAME not in env and contract.ENV_STEP_NAME not in env
    assert contract.ENV_TIME_LIMIT_S not in env and contract.ENV_COMPANION not in env  # a step's own, as on Anyscale
    assert request.metadata[contract.META_ROLE] == contract.ROLE_SUPERVISOR
    assert request.metadata[contract.META_SUPERVISES] == PID


class JobsAPI:
    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.jobs = {j["submission_id"]: j for j in jobs}

    def job(self, run_id: str) -> dict[str, Any] | None:
        return self.jobs.get(run_id)


def supervisor_job(n: int, status: str) -> dict[str, Any]:
    request = pipeline_supervisor_request(PID, f"s3://b/runs/p/{PID}", "p", [body("a", "gcs://_ray_pkg_wd.zip")],
                                          "http://head:8265", n)
    return {"submission_id": request.submission_id, "status": status, "runtime_env": request.runtime_env,
            "metadata": request.metadata}


def test_a_dead_supervisor_is_replaced_by_the_next_with_the_same_steps_and_a_stopped_one_is_not() -> None:
    died = JobsAPI(supervisor_job(1, "FAILED"))
    renewed = renewed_if_dead(died, PID, "http://head:8265")  # type: ignore[arg-type]
    assert not isinstance(renewed, dict) and renewed is not None
    assert renewed.submission_id == f"{PID}-supervisor-2"
    assert steps_of({"runtime_env": renewed.runtime_env}) == steps_of(supervisor_job(1, "FAILED"))
    for status in ("RUNNING", "SUCCEEDED", "STOPPED"):  # alive, done, or stopped by `rtjob stop`: kept as it is
        kept = renewed_if_dead(JobsAPI(supervisor_job(1, status)), PID, "http://head:8265")  # type: ignore[arg-type]
        assert isinstance(kept, dict) and kept["status"] == status
    two = JobsAPI(supervisor_job(1, "FAILED"), supervisor_job(2, "RUNNING"))
    assert renewed_if_dead(two, PID, "x")["submission_id"] == f"{PID}-supervisor-2"  # type: ignore[arg-type,index]
    assert renewed_if_dead(JobsAPI(), PID, "x") is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("steps", "env", "told"), [
    (False, {}, True),  # a plain run tells its end
    (False, {contract.ENV_PIPELINE_ID: PID}, False),  # a step does not: the pipeline's supervisor sends its one
    (True, {contract.ENV_PIPELINE_ID: PID}, True),  # notify.steps: true
])
def test_whose_end_notifies(steps: bool, env: dict[str, str], told: bool) -> None:
    config = NotifyConfig(on=("succeeded",), targets=(Target("webhook", "HOOK", "http://x"),), steps=steps)
    assert run_end_notifies(config, env) is told


def test_the_dry_run_prints_the_supervisors_request_masked(tmp_path) -> None:
    """render of a pipeline on Ray prints the supervisor's request beside the steps': every step's request inside
    it, masked (the webhook URL and the AWS secret never printed)."""
    from support.cli import base_env, rtjob

    env = {**base_env(tmp_path), "AWS_ACCESS_KEY_ID": "AKIAPIPELINEPREVIEW1", "AWS_SECRET_ACCESS_KEY": "pipeSecret/123456",
           "EPOCHS_HOOK": "http://127.0.0.1:9/hooks/pipeHookSecret99"}
    shown = rtjob("render", "tests/support/jobs/epochs.yaml", "--storage", "s3://b/runs", "--forward-aws-credentials",
                  "--submission-id", PID, "-o", "json", env=env)
    assert shown.returncode == 0, shown.stderr[-2000:]
    sent = json.loads(shown.stdout)["supervisor"]["submit_job"]
    assert sent["submission_id"] == f"{PID}-supervisor" and sent["entrypoint_num_cpus"] == 0
    steps = json.loads(sent["runtime_env"]["env_vars"][contract.ENV_PIPELINE_STEPS])
    assert [s["submission_id"] for s in steps] == [f"{PID}-train", f"{PID}-use"]
    assert "pipeSecret/123456" not in shown.stdout + shown.stderr and "pipeHookSecret99" not in shown.stdout


class Cluster:
    """The Jobs API a pipeline's supervisor reads and submits to, in memory: a step it submits ends at once with
    the status ``ends`` gives it (SUCCEEDED unless told), as a first attempt."""

    address = "http://head:8265"

    def __init__(self, ends: dict[str, str] | None = None, packages: tuple[str, ...] = ("_ray_pkg_wd.zip",)) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.ends = ends or {}
        self.packages = packages
        self.sent: list[str] = []
        self.stopped: list[str] = []

    def job(self, run_id: str) -> dict[str, Any] | None:
        return self.jobs.get(run_id)

    def request(self, method: str, path: str, **_: Any) -> Any:
        class Answer:
            status_code = 200 if path.rsplit("/", 1)[1] in self.packages else 404
        return Answer()

    def stop(self, run_id: str) -> bool:
        self.stopped.append(run_id)
        self.jobs[run_id]["status"] = "STOPPED"
        return True

    def submit(self, request: Any) -> Any:
        from rtjob.core.model import RunInfo, RunStatus, SubmitResult

        self.sent.append(request.run_id)
        self.jobs[request.run_id] = {"submission_id": request.run_id, "status": self.ends.get(request.run_id, "SUCCEEDED"),
                                     "driver_exit_code": 1, "metadata": request.metadata,
                                     "runtime_env": request.runtime_env}
        return SubmitResult(RunInfo(request.run_id, "p", "ray", RunStatus.PENDING), True)


def supervisor(cluster: Cluster, steps: list[dict[str, Any]]) -> Any:
    """The loop on Ray's primitives over the in-memory cluster, carrying ``steps`` (as its env would give them)."""
    from rtjob.backends.ray.in_cluster import RayClusterJobs
    from rtjob.runside.supervisor.loop import Supervisor

    jobs = RayClusterJobs(cluster, submit=cluster.submit)  # type: ignore[arg-type]
    jobs.steps = lambda: steps  # type: ignore[method-assign]
    return Supervisor(jobs)


def carry(cluster: Cluster, stops: list[bool] | None = None, code: int = 0,
          **more: Any) -> tuple[list[str | None], str | None, list[str]]:
    from rtjob.core.pipeline_status import overall
    from rtjob.runside.supervisor.loop import SupervisedPipeline, SupervisedRun

    ended: list[tuple[dict[str, str | None], str | None]] = []
    said: list[str] = []
    pending = list(stops or [])

    def stop() -> bool:
        return pending.pop(0) if pending else False

    def end(statuses: dict[str, str | None], why: str | None) -> str:
        from rtjob.core.model import RunStatus

        ended.append((statuses, why))
        return overall([RunStatus(s) if s else None for s in statuses.values()]).value

    side = SupervisedPipeline(stop_requested=stop, beat=lambda _: None, say=said.append, ended=end,
                              step=lambda body: SupervisedRun(stop_requested=stop, beat=lambda _: None, say=said.append),
                              **more)
    steps = [body("a", "gcs://_ray_pkg_wd.zip"), body("b", "gcs://_ray_pkg_wd.zip")]
    assert supervisor(cluster, steps).carry_pipeline(PID, side) == code
    if not ended:
        return [], None, said
    (carried, why), = ended
    assert list(carried) == [f"{PID}-a", f"{PID}-b"]
    return list(carried.values()), why, said


def test_the_steps_run_in_order_and_one_that_ran_is_attached_to() -> None:
    cluster = Cluster()
    cluster.jobs[f"{PID}-a"] = {"submission_id": f"{PID}-a", "status": "SUCCEEDED", "metadata": {}}  # a client was first
    statuses, why, _ = carry(cluster)
    assert statuses == ["SUCCEEDED", "SUCCEEDED"] and why is None and cluster.sent == [f"{PID}-b"]


def test_a_failed_step_ends_the_pipeline_before_the_next() -> None:
    cluster = Cluster(ends={f"{PID}-a": "FAILED"})
    statuses, _, _ = carry(cluster)
    assert statuses == ["FAILED", None] and cluster.sent == [f"{PID}-a"]


def test_a_stop_that_appears_while_it_submits_stops_that_step_and_runs_nothing_later() -> None:
    cluster = Cluster(ends={f"{PID}-a": "RUNNING"})
    statuses, _, _ = carry(cluster, stops=[False, True])  # the check before the submit, the one after it
    assert statuses == ["STOPPED", None] and cluster.stopped == [f"{PID}-a"] and cluster.sent == [f"{PID}-a"]


def test_a_step_whose_code_is_gone_ends_the_pipeline_failed_naming_it() -> None:
    statuses, why, _ = carry(Cluster(packages=()))
    assert statuses == ["FAILED", None] and why is not None and "gcs://_ray_pkg_wd.zip" in why


def test_the_pipeline_record_keeps_the_steps_it_did_not_carry(tmp_path) -> None:
    """`--from train`: the steps before it are reused (SUCCEEDED, not carried); the supervisor's end keeps every
    recorded step, with its status, and the pipeline's status is from all of them."""
    from rtjob.core.record import RunRecord
    from rtjob.runside.supervisor.pipeline_folder import PipelineFolder
    from rtjob.storage.records import read_record
    from support.planted import plant_record

    steps = [{"name": n, "run_id": f"{PID}-{n}", "reused_from": "earlier" if n in ("a", "b") else None}
             for n in ("a", "b", "c", "d")]
    plant_record(str(tmp_path), RunRecord(id=PID, job="p", backend="local", storage_uri=str(tmp_path),
                                          status="RUNNING", steps=steps), None)
    PipelineFolder(PID, str(tmp_path)).ended({f"{PID}-c": "SUCCEEDED", f"{PID}-d": "SUCCEEDED"}, None)
    record = read_record(str(tmp_path), None)
    assert record is not None and record.status == "SUCCEEDED" and record.completed_by == "supervisor"
    assert [(s["name"], s["status"]) for s in record.steps] == [(n, "SUCCEEDED") for n in ("a", "b", "c", "d")]
    PipelineFolder(PID, str(tmp_path)).ended({f"{PID}-c": "SUCCEEDED", f"{PID}-d": None}, None)  # a stop between
    assert read_record(str(tmp_path), None).status == "STOPPED"  # type: ignore[union-attr]


def test_a_restarted_supervisor_on_a_new_cluster_skips_the_steps_whose_records_say_succeeded() -> None:
    """The platform restarted the job hosting the supervisor (Anyscale's max_retries) on a cluster that knows no
    step: step a's record says SUCCEEDED, so only b runs."""
    cluster = Cluster()
    statuses, _, _ = carry(cluster, succeeded_before=lambda b: b["submission_id"] == f"{PID}-a")
    assert statuses == ["SUCCEEDED", "SUCCEEDED"] and cluster.sent == [f"{PID}-b"]


def test_a_supervisor_that_finds_the_end_recorded_runs_nothing_and_exits_as_the_pipeline_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    assert carry(cluster, ended_before=lambda: "SUCCEEDED")[0] == [] and cluster.sent == []
    monkeypatch.setenv(contract.ENV_SUPERVISOR_EXIT, "outcome")  # the job hosting it shows the pipeline's outcome
    assert carry(cluster, code=1, ended_before=lambda: "FAILED")[0] == [] and cluster.sent == []
    assert carry(Cluster(ends={f"{PID}-a": "FAILED"}), code=1)[0] == ["FAILED", None]
    assert carry(Cluster(), code=0)[0] == ["SUCCEEDED", "SUCCEEDED"]
    monkeypatch.delenv(contract.ENV_SUPERVISOR_EXIT)  # on Ray a FAILED supervisor job is a dead one: it exits 0
    assert carry(Cluster(ends={f"{PID}-a": "FAILED"}), code=0)[0] == ["FAILED", None]


def test_a_pipeline_whose_supervisor_keeps_dying_is_given_up_failed_after_three_replacements(
        tmp_path, monkeypatch: pytest.MonkeyPatch, receiver) -> None:
    """The same cap as a single run's (supervisor_jobs.MAX_REPLACEMENTS): supervisors 1-4 died, so the fifth carries
    nothing: the step that runs is stopped, the pipeline's record (a real local folder) ends FAILED with one line
    saying why, its notification reaches a loopback webhook once; then no client starts a sixth."""
    from rtjob.backends.ray.supervisor_jobs import GIVING_UP, MAX_REPLACEMENTS, supervisor_id
    from rtjob.core.record import RunRecord
    from rtjob.runside.supervisor.pipeline_folder import PipelineFolder
    from rtjob.storage.records import read_record
    from support.planted import plant_record

    assert MAX_REPLACEMENTS == 3 and GIVING_UP == 5
    monkeypatch.setenv(contract.ENV_NOTIFY, json.dumps({"on": ["failed"], "steps": False,
                                                        "targets": [{"type": "webhook", "env": "HOOK_URL"}]}))
    monkeypatch.setenv("HOOK_URL", receiver.url("/hook"))
    monkeypatch.setenv(contract.ENV_JOB_NAME, "p")
    steps = [body("a", "gcs://_ray_pkg_wd.zip"), body("b", "gcs://_ray_pkg_wd.zip")]
    plant_record(str(tmp_path), RunRecord(id=PID, job="p", backend="local", storage_uri=str(tmp_path), status="RUNNING",
                                          steps=[{"name": n, "run_id": f"{PID}-{n}"} for n in ("a", "b")]), None)
    cluster = Cluster()
    cluster.jobs[f"{PID}-a"] = {"submission_id": f"{PID}-a", "status": "RUNNING", "metadata": {}}  # step a runs
    for n in range(1, GIVING_UP + 1):
        cluster.jobs[supervisor_id(PID, n)] = supervisor_job(n, "FAILED" if n < GIVING_UP else "RUNNING")
    folder = PipelineFolder(PID, str(tmp_path))
    # on Ray a supervisor job that FAILED is one that died: it exits 0
    assert supervisor(cluster, steps).carry_pipeline(PID, folder.supervised_pipeline()) == 0
    line = (f"its supervisor died 4 times ({supervisor_id(PID, 4)} was the last): rtjob gave the pipeline up after "
            "3 replacements")
    assert cluster.stopped == [f"{PID}-a"] and cluster.sent == []  # nothing submitted, the running step stopped
    record = read_record(str(tmp_path), None)
    assert record is not None and record.status == "FAILED" and record.message == line
    assert record.completed_by == "supervisor" and record.carried_by == "supervisor"
    folder.gave_up(line)  # a second try (a restarted process) tells nothing more
    told = receiver.bodies("/hook")
    assert [(b["run_id"], b["outcome"], b["error"]) for b in told] == [(PID, "failed", line)]  # type: ignore[index]
    cluster.jobs[supervisor_id(PID, GIVING_UP)]["status"] = "FAILED"  # the giving-up one is never replaced
    kept = renewed_if_dead(cluster, PID, "http://head:8265")  # type: ignore[arg-type]
    assert isinstance(kept, dict) and kept["submission_id"] == supervisor_id(PID, GIVING_UP)


def test_the_last_replacement_still_carries_the_pipeline() -> None:
    from rtjob.backends.ray.supervisor_jobs import GIVING_UP, supervisor_id

    cluster = Cluster()
    for n in range(1, GIVING_UP):
        cluster.jobs[supervisor_id(PID, n)] = supervisor_job(n, "FAILED" if n < GIVING_UP - 1 else "RUNNING")
    statuses, why, _ = carry(cluster)
    assert statuses == ["SUCCEEDED", "SUCCEEDED"] and why is None and cluster.sent == [f"{PID}-a", f"{PID}-b"]
