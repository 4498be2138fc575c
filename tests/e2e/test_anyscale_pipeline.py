"""A pipeline on Anyscale, with what Anyscale's cluster would run run for real.

rtjob (in-process) submits through the anyscale SDK to the SDK's shipped fake client (Anyscale's control plane cannot
run here). The one JobConfig it sent, exactly as the fake received it (entrypoint, env, the working dir and py_modules
the SDK packaged), is then run the way Anyscale runs a job: as a Ray job on the session's embedded cluster, with no
rtjob client alive. Its driver, the pipeline's supervisor, finds that cluster's Jobs API from inside (the address
from Ray's GCS, the token the cluster's processes carry), runs each step there as a Ray job with its own code
uploaded, and records the pipeline's end and its one notification in S3 (moto). The CLI then reads the steps from
storage; a restart of the job (Anyscale's max_retries) finds the end recorded and runs nothing again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rtjob.main import main
from support.cli import REPO, new_id, plant
from support.fake_anyscale import ApiLikeFake, Step, Timeline, use_fake
from support.ray_jobs import JobsAPI, ended, wait_for
from support.s3_server import S3Server, bucket_fixture
from support.scrub import scrub
from support.webhook import Receiver

pytestmark = pytest.mark.cluster

BUCKET = "rtjob-anyscale-pipelines"
s3 = bucket_fixture(BUCKET)
PIPELINE = "tests/support/jobs/epochs.yaml"
FILE_TOKEN = plant("anyscale-file-token-8e7d6c5b4a")  # a file:// secret: only the driver's node has it
HELD_TOKEN = plant("anyscale-env-token-1c2d3e4f5a")  # an env: secret: only the client has it
SECRET_SCRIPT = '''
import hashlib, os, ray
NAMES = ("FILE_TOK", "HELD_TOK", "AWS_SECRET_ACCESS_KEY")
def seen():
    return " ".join(hashlib.sha256(os.environ.get(n, "").encode()).hexdigest()[:16] for n in NAMES)
print("driver " + seen(), flush=True)
ray.init()
print("worker " + ray.get(ray.remote(num_cpus=0)(seen).remote()), flush=True)
'''


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def host(api: JobsAPI, job_id: str, config: object, dirs: list[str], **env: str) -> None:
    """Run the Anyscale job's config as Anyscale would, as a Ray job: its entrypoint (in a shell), env (plus what
    Anyscale sets, ``env``), working dir and modules."""
    from ray.job_submission import JobSubmissionClient

    runtime_env = config.runtime_env  # type: ignore[attr-defined]
    client = JobSubmissionClient(api.address, headers={"Authorization": f"Bearer {api.token}"})
    client.submit_job(entrypoint=config.entrypoint, submission_id=job_id,  # type: ignore[attr-defined]
                      runtime_env={"working_dir": dirs[0], "py_modules": dirs[1:],
                                   "env_vars": {**runtime_env.env_vars, **env}}, entrypoint_num_cpus=0)


def record(s3: S3Server, job: str, run_id: str) -> dict:
    got = s3.client().get_object(Bucket=BUCKET, Key=f"runs/{job}/{run_id}/rtjob-run.json")
    return json.loads(got["Body"].read())


@pytest.fixture(name="anyscale")
def anyscale_fixture(s3: S3Server, receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
                     tmp_path: Path) -> ApiLikeFake:
    """The in-process CLI with the anyscale SDK's fake as Anyscale, S3 (moto) as storage, the webhook receiver."""
    scrub(monkeypatch)
    for name, value in {**s3.env(), "EPOCHS_HOOK": receiver.url("/hook"), "RTJOB_HOME": str(tmp_path / "home"),
                        "HOME": str(tmp_path / "user")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(REPO)
    return use_fake(monkeypatch)


def test_a_file_secret_reaches_the_driver_and_its_ray_workers_of_a_hosted_anyscale_job(
        cluster_env: dict[str, str], s3: S3Server, anyscale: ApiLikeFake, capsys: pytest.CaptureFixture[str],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45 on Anyscale: the JobConfig carries the references only, and no worker_process_setup_hook (it has no
    such field). The values only the client holds (an env: secret, the forwarded AWS credentials) travel in the
    sealed package the SDK uploads (a py_module), never in the JobConfig. Hosted as Anyscale runs it, the companion
    unseals those, resolves the file:// secret on the driver's node, puts them in the entrypoint's environment and
    the hook in the job config Ray hands the entrypoint, so a Ray task of the run sees them too; the JobConfig,
    Ray's job info and the driver's log hold no value."""
    import hashlib

    secret = tmp_path / "file-token"
    secret.write_text(FILE_TOKEN + "\n")
    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "sealed.py").write_text(SECRET_SCRIPT)
    (project / "jobs" / "sealed.yaml").write_text("name: sealed\nentrypoint: python sealed.py\nworking_dir: ..\n"
                                                  f"requirements: []\nsecrets:\n  FILE_TOK: file://{secret}\n"
                                                  "  HELD_TOK: env:MY_HELD_TOKEN\n")
    monkeypatch.setenv("MY_HELD_TOKEN", HELD_TOKEN)
    api, run_id = JobsAPI(cluster_env), new_id("anysec")
    code, _, err = cli(capsys, "submit", str(project / "jobs" / "sealed.yaml"), "--backend", "anyscale", "--storage",
                       f"s3://{BUCKET}/runs", "--forward-aws-credentials", "--submission-id", run_id, "--no-wait")
    assert code == 0, err
    config = anyscale.submitted_job.config
    assert json.loads(config.runtime_env.env_vars["RTJOB_SECRET_REFS"]) == {"FILE_TOK": f"file://{secret}",
                                                                           "HELD_TOK": "env:MY_HELD_TOKEN"}
    aws_key = s3.env()["AWS_SECRET_ACCESS_KEY"]
    assert HELD_TOKEN not in repr(config) and aws_key not in repr(config)  # what Anyscale keeps of the job

    host(api, run_id, config, anyscale.uploaded_dirs)  # Anyscale starts the job: no rtjob alive
    status = wait_for(ended(api, run_id), 180, "the hosted job to end")
    log = api.logs(run_id)
    assert status == "SUCCEEDED", log[-3000:]
    want = " ".join(hashlib.sha256(v.encode()).hexdigest()[:16] for v in (FILE_TOKEN, HELD_TOKEN, aws_key))
    assert f"driver {want}" in log and f"worker {want}" in log, log[-3000:]
    held = log + json.dumps(api.job(run_id))
    assert FILE_TOKEN not in held and HELD_TOKEN not in held and aws_key not in held


def test_a_pipeline_hosted_as_one_anyscale_job_runs_its_steps_on_that_jobs_cluster(
        cluster_env: dict[str, str], s3: S3Server, receiver: Receiver, anyscale: ApiLikeFake,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = anyscale
    api = JobsAPI(cluster_env)
    pid = new_id("anyp")
    code, out, err = cli(capsys, "submit", PIPELINE, "--backend", "anyscale", "--storage", f"s3://{BUCKET}/runs",
                         "--forward-aws-credentials", "--submission-id", pid, "--no-wait")
    assert code == 0, err
    sent = fake.submitted_job
    assert sent.name == f"{pid}-supervisor" and len(fake._jobs) == 1
    env = sent.config.runtime_env.env_vars
    assert "RTJOB_DASHBOARD_ADDRESS" not in env  # the client never saw that cluster: the driver finds it itself
    aws_key = s3.env()["AWS_SECRET_ACCESS_KEY"]  # forwarded: in the job's sealed package, which the supervisor
    assert aws_key not in repr(sent.config)  # seals again for each step (the steps write to S3 with it)

    host(api, f"{pid}-supervisor", sent.config, fake.uploaded_dirs)  # Anyscale starts the job: no rtjob alive
    status = wait_for(ended(api, f"{pid}-supervisor"), 300, "the job hosting the pipeline to end")
    hosted = api.logs(f"{pid}-supervisor")
    assert status == "SUCCEEDED", hosted[-3000:]
    assert f"submitted {pid}-train" in hosted and f"submitted {pid}-use" in hosted, hosted[-3000:]
    assert api.status(f"{pid}-train") == "SUCCEEDED" and api.status(f"{pid}-use") == "SUCCEEDED"
    assert aws_key not in json.dumps(api.job(f"{pid}-train")) + json.dumps(api.job(f"{pid}-use"))
    got = s3.client().get_object(Bucket=BUCKET, Key=f"runs/epochs-use/{pid}-use/consumed.txt")["Body"].read()
    assert got == b"1,2,3"  # step 2 ran on step 1's output
    pipeline = record(s3, "epochs", pid)
    assert pipeline["status"] == "SUCCEEDED" and pipeline["completed_by"] == "supervisor"
    assert [s["status"] for s in pipeline["steps"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert [(json.loads(b)["run_id"], json.loads(b)["outcome"]) for p, _, b in receiver.got if p == "/hook"] == \
        [(pid, "succeeded")]

    # The client again: Anyscale says the job SUCCEEDED; the steps come from their records and logs in storage.
    Timeline(fake, [Step("SUCCESS", "SUCCEEDED", "pipeline SUCCEEDED\n", new_run=True)])
    code, out, err = cli(capsys, "wait", pid, "--timeout", "1m", "-o", "json")
    assert code == 0 and json.loads(out)["status"] == "SUCCEEDED", err
    code, out, err = cli(capsys, "status", pid, "-o", "json")
    shown = json.loads(out)
    assert code == 0 and [s["status"] for s in shown["steps"]] == ["SUCCEEDED"] * 2, err
    assert shown["supervisor"]["id"] == f"{pid}-supervisor"
    code, out, err = cli(capsys, "logs", f"{pid}-use")
    assert code == 0 and "consumed epochs [1, 2, 3]" in out, (out[-2000:], err)
    code, out, err = cli(capsys, "logs", pid)  # every step's log, in order, from storage
    assert code == 0 and out.index("epoch 3 trained") < out.index("consumed epochs [1, 2, 3]"), (out[-2000:], err)

    # Anyscale's max_retries restarts the job: the new driver finds the end recorded, runs nothing, exits as it ended.
    host(api, f"{pid}-supervisor-restart", sent.config, fake.uploaded_dirs)
    assert wait_for(ended(api, f"{pid}-supervisor-restart"), 120, "the restarted job to end") == "SUCCEEDED"
    assert "ended SUCCEEDED already: nothing to carry" in api.logs(f"{pid}-supervisor-restart")
    assert api.job(f"{pid}-train-retry1") is None and len(receiver.got) == 1


def test_a_scheduled_pipeline_runs_under_the_id_of_the_job_its_schedule_started(
        cluster_env: dict[str, str], s3: S3Server, receiver: Receiver, anyscale: ApiLikeFake,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`schedule apply` of a pipeline; a run the schedule starts (its job made from the schedule's config, as the
    fake's trigger does not) is hosted on the cluster with the id Anyscale gives it: the supervisor begins the
    pipeline's record (no client wrote one), runs the steps as <job id>-<step>, and `rtjob status <job id>` shows
    them from storage."""
    from anyscale.client.openapi_client.models import CreateInternalProductionJob

    fake = anyscale
    api = JobsAPI(cluster_env)
    creds = [f"--env={k}={v}" for k, v in s3.env().items()]  # the steps reach the bucket (moto) with these
    code, out, err = cli(capsys, "schedule", "apply", PIPELINE, "--cron", "0 3 * * *", "--name", "nightly-epochs",
                         "--storage", f"s3://{BUCKET}/runs", *creds)
    assert code == 0, err
    (schedule,) = fake._schedules.values()
    job = fake.submit_job(CreateInternalProductionJob(
        name=schedule.name, project_id=schedule.project_id, config=schedule.config,
        local_vars_configuration=fake.OPENAPI_NO_VALIDATION))
    hosted = f"{job.id}-on-the-cluster"
    host(api, hosted, schedule.config, fake.uploaded_dirs, ANYSCALE_HA_JOB_ID=job.id)
    assert wait_for(ended(api, hosted), 300, "the scheduled run to end") == "SUCCEEDED", api.logs(hosted)[-3000:]
    assert api.status(f"{job.id}-train") == "SUCCEEDED" and api.status(f"{job.id}-use") == "SUCCEEDED"
    pipeline = record(s3, "epochs", job.id)  # begun and ended by the supervisor
    assert pipeline["status"] == "SUCCEEDED" and pipeline["backend"] == "anyscale"
    assert [(s["name"], s["status"]) for s in pipeline["steps"]] == [("train", "SUCCEEDED"), ("use", "SUCCEEDED")]
    assert [json.loads(b)["run_id"] for p, _, b in receiver.got if p == "/hook"] == [job.id]

    Timeline(fake, [Step("SUCCESS", "SUCCEEDED", "pipeline SUCCEEDED\n", new_run=True)])
    code, out, err = cli(capsys, "status", job.id, "--backend", "anyscale", "-o", "json")
    shown = json.loads(out)
    assert code == 0 and shown["status"] == "SUCCEEDED", err
    assert [(s["id"], s["status"]) for s in shown["steps"]] == [(f"{job.id}-train", "SUCCEEDED"),
                                                                    (f"{job.id}-use", "SUCCEEDED")]


def test_a_stop_reaches_the_steps_inside_the_anyscale_job_through_storage(
        cluster_env: dict[str, str], s3: S3Server, receiver: Receiver, anyscale: ApiLikeFake,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`rtjob stop` of a pipeline on Anyscale reaches only storage and Anyscale (not that cluster's Jobs API): the
    supervisor sees the stop marker while step 1 trains, stops it, runs nothing later and records STOPPED; the job,
    still running as far as Anyscale says, is terminated once rtjob's patience is out."""
    from rtjob.runs.lifecycle import stopping

    fake = anyscale
    api = JobsAPI(cluster_env)
    pid = new_id("anys")
    train = f"{pid}-train"
    # step 1 trains far longer than the stop takes to reach it (however busy the machine): only the stop ends it
    code, _, err = cli(capsys, "submit", PIPELINE, "--backend", "anyscale", "--storage", f"s3://{BUCKET}/runs",
                       "--forward-aws-credentials", "--submission-id", pid, "--no-wait", "--set", "train.args.epochs=90")
    assert code == 0, err
    host(api, f"{pid}-supervisor", fake.submitted_job.config, fake.uploaded_dirs)
    wait_for(lambda: "epoch 1 trained" in (api.logs(train) if api.job(train) else ""), 180, "step 1 to train")
    Timeline(fake, [Step("RUNNING", "RUNNING", "carrying\n", new_run=True)])
    monkeypatch.setattr(stopping.stop_pipeline, "__defaults__", (2.0,))  # speed only: rtjob's patience with the job
    code, _, err = cli(capsys, "stop", pid)
    assert code == 0, err
    assert wait_for(ended(api, f"{pid}-supervisor"), 120, "the supervisor to end") == "FAILED"  # exits as it ended
    # it saw the stop while step 1 ran ("stopping"), or once the client's stop of step 1 had ended it first
    assert "stop was requested" in api.logs(f"{pid}-supervisor")
    assert api.status(train) == "STOPPED" and api.job(f"{train}-retry1") is None and api.job(f"{pid}-use") is None
    pipeline = record(s3, "epochs", pid)
    assert pipeline["status"] == "STOPPED" and [s["status"] for s in pipeline["steps"]] == ["STOPPED", None]
    assert [json.loads(b)["outcome"] for p, _, b in receiver.got if p == "/hook"] == ["stopped"]
    assert fake.terminated  # the job Anyscale still called RUNNING

    # A stop that outlasts the supervisor: Anyscale keeps the job RUNNING past rtjob's patience and the stop's own
    # wait (its supervisor never records the stop: here Anyscale never started it on a cluster). The client that
    # stopped it ends the pipeline's record STOPPED, and `status` says so though Anyscale still says RUNNING.
    slow = new_id("anyslow")
    code, _, err = cli(capsys, "submit", PIPELINE, "--backend", "anyscale", "--storage", f"s3://{BUCKET}/runs",
                       "--forward-aws-credentials", "--submission-id", slow, "--no-wait")
    assert code == 0 and record(s3, "epochs", slow)["status"] == "PENDING", err
    Timeline(fake, [Step("RUNNING", "RUNNING", "carrying\n", new_run=True)] * 500)  # each read: RUNNING again
    code, out, err = cli(capsys, "stop", slow, "-o", "json")
    assert code == 0 and json.loads(out)["status"] == "STOPPED", (out, err)
    assert fake._jobs[fake.terminated[-1]].name == f"{slow}-supervisor"  # stopped after the patience
    ended_slow = record(s3, "epochs", slow)
    assert (ended_slow["status"], ended_slow["completed_by"]) == ("STOPPED", "client"), ended_slow
    assert "did not end within the stop's wait" in ended_slow["message"]
    code, out, err = cli(capsys, "status", slow, "-o", "json")
    assert code == 0 and json.loads(out)["status"] == "STOPPED", (out, err)
    assert json.loads(out)["supervisor"]["alive"]  # Anyscale still calls its job RUNNING: the record's end stands
    code, out, err = cli(capsys, "wait", slow, "--timeout", "1m", "-o", "json")  # not until Anyscale's job ends
    assert code == 1 and json.loads(out)["status"] == "STOPPED", (out, err)
