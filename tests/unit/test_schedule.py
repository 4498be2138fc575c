"""`rtjob schedule ...` offline: cron and time-zone checks before anything is sent or written (GitHub's own
rules for `render --github`), and apply / list /
pause / resume / trigger / delete through rtjob's adapter and the anyscale SDK as shipped, against the
SDK's FakeAnyscaleClient (tests/fake_anyscale.py: its known faults fixed as the real API behaves)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from rtjob.backends.anyscale import client as anyscale_client
from rtjob.core.errors import BadInput
from rtjob.jobspec.cron import (
    next_runs,
    runs_too_often,
    validate_cron,
    validate_github_cron,
    validate_iana_timezone,
    validate_timezone,
)
from support.prices import dollars, g5_4xlarge
from test_anyscale_backend import Cli, cli_fixture  # noqa: F401 - the in-process CLI fixture, `cli`

if TYPE_CHECKING:  # the anyscale SDK: imported by the `cli` fixture, not when this file is collected
    from support.fake_anyscale import ApiLikeFake

APPLY = ("schedule", "apply", "ddp-resnet", "--nodes", "3", "--storage", "s3://bucket/runs")


@pytest.mark.parametrize("cron", [
    "61 * * * *",  # minute out of range
    "* * * *",  # four fields
    "0 0 * * * *",  # six fields
    "@daily",  # a nickname, not five fields
    "0 3 * * FRY",  # no such day
    "0 3 31 2-x *",  # not a range
    "",
])
def test_bad_cron_exits_2_before_anything_is_sent(cli: Cli, monkeypatch: pytest.MonkeyPatch, cron: str) -> None:
    def no_client() -> ApiLikeFake:
        raise AssertionError("a bad cron reached Anyscale")

    monkeypatch.setattr(anyscale_client, "default_client", no_client)
    res = cli(*APPLY, "--cron", cron)
    assert res.code == 2, res.err
    assert res.err.count("\n") == 1 and res.err.startswith(f"rtjob: error: --cron {cron!r}")
    assert "5 fields" in res.err and "Traceback" not in res.err
    assert not cli.fake._schedules


def test_bad_timezone_exits_2(cli: Cli) -> None:
    res = cli(*APPLY, "--cron", "0 3 * * 1", "--timezone", "Mars/Olympus")
    assert res.code == 2 and "--timezone 'Mars/Olympus'" in res.err
    assert not cli.fake._schedules


def test_cron_helpers() -> None:
    assert validate_cron("  0   3 * *  1 ") == "0 3 * * 1"
    assert validate_cron("*/15 8-18 * * MON-FRI") == "*/15 8-18 * * MON-FRI"
    with pytest.raises(BadInput):
        validate_cron("0 25 * * *")
    assert validate_timezone("Europe/Berlin") == "Europe/Berlin"
    now = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)  # a Sunday
    assert next_runs("0 3 * * 1", "UTC", 2, now) == ["2026-11-23T03:00+00:00", "2026-11-30T03:00+00:00"]
    assert next_runs("0 3 * * *", "Europe/Berlin", 1, now) == ["2026-11-23T03:00+01:00"]


def test_dry_run_prints_a_schedule_anyscale_accepts_and_sends_nothing(cli: Cli) -> None:
    from anyscale.schedule.models import ScheduleConfig

    res = cli(*APPLY, "--cron", "0 3 * * 1", "--timezone", "Europe/Berlin", "--name", "weekly-ddp",
              "--env", "HF_TOKEN=hf_abcdefghijklmnop", "--dry-run")
    assert res.code == 0, res.err
    assert "schedule weekly-ddp: cron '0 3 * * 1' (Europe/Berlin); next: " in res.out
    assert f"cost per hour of a run: est. {dollars(g5_4xlarge(3))}/h" in res.out
    assert "hf_abcdefghijklmnop" not in res.out
    data = yaml.safe_load(res.out)
    config = ScheduleConfig.from_dict(data)
    assert config.cron_expression == "0 3 * * 1" and config.timezone == "Europe/Berlin"
    job = config.job_config
    assert job.name == "weekly-ddp" and job.max_retries == 0 and job.timeout_s == 7200
    assert job.env_vars["RTJOB_SCHEDULE"] == "weekly-ddp" and "RTJOB_RUN_NAME" not in job.env_vars
    assert job.entrypoint.startswith('export RTJOB_RUN_NAME="${ANYSCALE_HA_JOB_ID:-weekly-ddp-')
    # Each run's folder is named in the shell before the companion starts (it syncs to RTJOB_RUN_URI).
    assert 'export RTJOB_RUN_URI="$RTJOB_RUN_DIR"; python -m rtjob.runside.companion ' in job.entrypoint
    assert job.entrypoint.endswith("'python -m training.ray_ddp --epochs 3 --global-batch-size 128 --lr 0.001 "
                                   "--dataset mnist'")
    assert job.compute_config.worker_nodes[0].min_nodes == job.compute_config.worker_nodes[0].max_nodes == 3
    assert job.tags["rtjob-schedule"] == "weekly-ddp" and "rtjob-run-id" not in job.tags
    assert not cli.fake._schedules


def test_apply_list_pause_resume_trigger_delete(cli: Cli) -> None:
    res = cli(*APPLY, "--cron", "0 3 * * 1", "--env", "HF_TOKEN=hf_abcdefghijklmnop", "--output", "json")
    assert res.code == 0, res.err
    applied = json.loads(res.out)
    assert applied["name"] == "ddp-resnet" and applied["cron"] == "0 3 * * 1" and len(applied["next_runs"]) == 3
    (schedule,) = cli.fake._schedules.values()
    assert schedule.id == applied["id"] and schedule.schedule.cron_expression == "0 3 * * 1"
    assert schedule.schedule.timezone == "UTC" and schedule.config.max_retries == 0
    assert schedule.config.runtime_env.env_vars["HF_TOKEN"] == "hf_abcdefghijklmnop"  # sent, never printed
    assert "hf_abcdefghijklmnop" not in res.out + res.err
    assert schedule.job_tags["rtjob-storage"] == "s3://bucket/runs/ddp-resnet"

    # apply again: the same schedule (by name) is updated, not duplicated
    res = cli(*APPLY, "--cron", "30 4 * * *")
    assert res.code == 0, res.err
    assert list(cli.fake._schedules) == [applied["id"]]
    assert cli.fake._schedules[applied["id"]].schedule.cron_expression == "30 4 * * *"

    listed = json.loads(cli("schedule", "list", "--output", "json").out)
    assert listed == [{"id": applied["id"], "name": "ddp-resnet", "state": "ENABLED", "cron": "30 4 * * *",
                       "timezone": "UTC", "job": "ddp-resnet"}]
    assert "ddp-resnet" in cli("schedule", "list").out

    assert cli("schedule", "pause", "ddp-resnet").code == 0
    assert not cli.fake.schedule_is_enabled(applied["id"])
    assert json.loads(cli("schedule", "list", "--output", "json").out)[0]["state"] == "DISABLED"
    assert cli("schedule", "resume", "ddp-resnet").code == 0
    assert cli.fake.schedule_is_enabled(applied["id"])

    res = cli("schedule", "trigger", "ddp-resnet")
    assert res.code == 0 and "triggered" in res.err
    assert cli.fake.trigger_counts(applied["id"]) == 1

    res = cli("schedule", "delete", "ddp-resnet")
    assert res.code == 0, res.err
    assert not cli.fake._schedules
    res = cli("schedule", "trigger", "ddp-resnet")
    assert res.code == 2 and "Schedule with name 'ddp-resnet' was not found" in res.err


def test_schedule_render_without_github_is_the_dry_run(cli: Cli) -> None:
    res = cli("schedule", "render", "hello", "--cron", "0 6 * * *")
    assert res.code == 0, res.err
    data = yaml.safe_load(res.out)
    assert data["cron_expression"] == "0 6 * * *" and data["job_config"]["name"] == "hello"
    assert not cli.fake._schedules


def test_a_scheduled_run_is_listed_under_its_anyscale_id_with_its_own_folder(cli: Cli) -> None:
    """What a trigger starts (the fake only counts triggers; here the control plane's job is made from the
    applied schedule's config): rtjob reports it by Anyscale job id, its run folder named after that id."""
    from anyscale.client.openapi_client.models import CreateInternalProductionJob

    assert cli(*APPLY, "--cron", "0 3 * * 1").code == 0
    (schedule,) = cli.fake._schedules.values()
    job = cli.fake.submit_job(CreateInternalProductionJob(
        name=schedule.name, project_id=schedule.project_id, config=schedule.config,
        local_vars_configuration=cli.fake.OPENAPI_NO_VALIDATION))
    runs = json.loads(cli("list", "--backend", "anyscale", "--output", "json").out)
    assert [(r["id"], r["job"], r["storage_uri"]) for r in runs] == [
        (job.id, "ddp-resnet", f"s3://bucket/runs/ddp-resnet/{job.id}")]


# ---------------------------------------------------------------------------------------------
# render --github: cron that GitHub runs, an IANA time zone, and --out written whole or not at all

GITHUB = ("schedule", "render", "hello", "--github")


@pytest.mark.parametrize(("cron", "expect"), [
    ("0 3 L * *", "does not run L (last)"),
    ("0 3 * * 5L", "does not run L (last)"),
    ("0 3 15W * *", "does not run W (nearest weekday)"),
    ("0 3 * * 1#2", "does not run # (nth weekday)"),
    ("0 3 ? * MON", "does not run ? (no value)"),
    ("H 3 * * *", "does not run H (hashed)"),
    ("0 0 3 * * *", "6 fields (seconds or years?)"),
    ("@reboot", "does not run @reboot"),
    ("@daily", "does not run @daily"),
    ("* * * * *", "runs less than 5 minutes apart"),
    ("*/4 * * * *", "runs less than 5 minutes apart"),
    ("0,3 6 * * *", "runs less than 5 minutes apart"),
    ("*/7 * * * *", "runs less than 5 minutes apart"),  # xx:56 then the next hour's xx:00
    ("0,58 0,23 * * *", "runs less than 5 minutes apart"),  # 23:58 then 00:00 the next day
    ("0 3 30 2 *", "never runs"),
    ("0 3 * *", "not a valid cron expression"),
])
def test_github_refuses_cron_it_does_not_run_and_writes_nothing(cli: Cli, tmp_path: Path, cron: str,
                                                                 expect: str) -> None:
    out = tmp_path / ".github" / "workflows" / "train.yml"
    res = cli(*GITHUB, "--cron", cron, "--out", str(out))
    assert res.code == 2 and res.out == ""
    assert res.err.count("\n") == 1 and res.err.startswith(f"rtjob: error: --cron {cron!r}: "), res.err
    assert expect in res.err and "Traceback" not in res.err
    assert "5 fields" in res.err and "at most once every 5 minutes" in res.err  # what GitHub runs
    assert not out.parent.exists()


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 3 * * 1", "*/30 6-18 * * MON-FRI", "0 3 1,15 JAN-JUN *",
                                  "58 23 * * *", "0,58 0,23 * * 1", "55 23 31 12 *", "0 0 * * 0"])
def test_github_cron_that_runs(cron: str) -> None:
    assert validate_github_cron(f"  {cron} ") == cron


def test_runs_too_often() -> None:
    assert not runs_too_often("*/5 * * * *") and runs_too_often("*/4 * * * *")
    assert runs_too_often("0,58 0,23 1,31 * *")  # Jan 31 23:58, Feb 1 00:00
    assert not runs_too_often("0,58 0,23 * * 1")  # Monday 23:58, then Monday 00:00 a week later


@pytest.mark.parametrize("name", ["Mars/Olympus", "local", "Europe/Berlin; rm -rf /", "../../etc/passwd", ""])
def test_github_timezone_must_be_an_iana_name(cli: Cli, tmp_path: Path, name: str) -> None:
    out = tmp_path / "train.yml"
    res = cli(*GITHUB, "--cron", "0 3 * * 1", "--timezone", name, "--out", str(out))
    assert res.code == 2 and res.out == "" and res.err.count("\n") == 1
    assert res.err.startswith(f"rtjob: error: --timezone {name!r}: ") and "IANA time zone name like Europe/Berlin" in res.err
    assert not out.exists()


def test_iana_timezone_helper() -> None:
    assert validate_iana_timezone("America/New_York") == "America/New_York"
    assert validate_iana_timezone("UTC") == "UTC" and validate_iana_timezone("Etc/GMT+9") == "Etc/GMT+9"


@pytest.mark.parametrize("args", [
    ("--cron", "0 3 L * *"),
    ("--cron", "*/2 * * * *"),
    ("--cron", "0 3 * * 1", "--timezone", "Mars/Olympus"),
    ("--cron", "0 3 * * 1", "--timeout", "5x"),
    ("--cron", "0 3 * * 1", "--backend", "local"),
    ("--cron", "0 3 * * 1", "--env", "A=b"),
], ids=["L", "every-2-min", "timezone", "timeout", "backend", "env"])
def test_a_refusal_leaves_an_existing_out_file_as_it_was(cli: Cli, tmp_path: Path, args: tuple[str, ...]) -> None:
    out = tmp_path / "train.yml"
    out.write_text("# the user's workflow\n")
    res = cli(*GITHUB, *args, "--out", str(out))
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert out.read_text() == "# the user's workflow\n" and list(tmp_path.iterdir()) == [out]


def test_out_writes_what_render_prints(cli: Cli, tmp_path: Path) -> None:
    printed = cli(*GITHUB, "--cron", "0 3 * * 1", "--timezone", "Europe/Berlin")
    assert printed.code == 0, printed.err
    assert '    - cron: "0 3 * * 1"\n      timezone: "Europe/Berlin"  # IANA name' in printed.out
    out = tmp_path / ".github" / "workflows" / "train.yml"
    for _ in range(2):  # a new file, then the same file replaced whole
        res = cli(*GITHUB, "--cron", "0 3 * * 1", "--timezone", "Europe/Berlin", "--out", str(out))
        assert res.code == 0 and res.out == "", res.err
        assert f"wrote {out}: runs hello on '0 3 * * 1' (Europe/Berlin)" in res.err
        assert out.read_text() == printed.out and list(out.parent.iterdir()) == [out]  # no temporary file left


def test_out_refuses_a_folder_and_needs_github(cli: Cli, tmp_path: Path) -> None:
    res = cli(*GITHUB, "--cron", "0 3 * * 1", "--out", str(tmp_path))
    assert res.code == 2 and "a folder; give the workflow file" in res.err and list(tmp_path.iterdir()) == []
    res = cli("schedule", "render", "hello", "--cron", "0 3 * * 1", "--out", str(tmp_path / "s.yaml"))
    assert res.code == 2 and "--out writes a --github workflow" in res.err and not (tmp_path / "s.yaml").exists()


def test_a_scheduled_run_gets_its_own_run_dir_in_its_storage() -> None:
    """Every triggered run names its folder at start (ANYSCALE_HA_JOB_ID): RTJOB_RUN_DIR follows it, in a real shell."""
    import subprocess

    from rtjob.backends.anyscale.request import AnyscaleJobRequest
    from rtjob.backends.anyscale.schedules import schedule_config

    env = {"RTJOB_RUN_NAME": "rtjob-x-1", "RTJOB_RUN_DIR": "s3://b/runs/x/rtjob-x-1", "RTJOB_STORAGE_PATH": "s3://b/runs/x"}
    request = AnyscaleJobRequest(run_id="rtjob-x-1", job_file="jobs/x.yaml", notes=[], config={
        "name": "rtjob-x-1", "entrypoint": 'echo "$RTJOB_RUN_DIR"', "env_vars": env,
        "tags": {}})
    job = schedule_config(request, "nightly", "0 3 * * *", "UTC")["job_config"]
    assert "RTJOB_RUN_DIR" not in job["env_vars"] and "RTJOB_RUN_NAME" not in job["env_vars"]
    shell_env = {**job["env_vars"], "ANYSCALE_HA_JOB_ID": "prodjob_abc", "PATH": "/usr/bin:/bin"}
    ran = subprocess.run(["bash", "-c", job["entrypoint"]], env=shell_env, capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "s3://b/runs/x/prodjob_abc"


def test_a_pipeline_schedule_runs_one_job_per_trigger_named_after_that_job(cli: Cli,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline's schedule: each run is one Anyscale job whose driver (the supervisor) runs the steps, the pipeline
    planned under a placeholder id that each run replaces with its own job id (ANYSCALE_HA_JOB_ID). What that driver
    then does runs for real in tests/e2e/test_anyscale_pipeline.py."""
    from anyscale.client.openapi_client.models import CreateInternalProductionJob
    from rtjob.runside.supervisor.pipeline_folder import take_run_id

    import rtjob_contract as contract

    monkeypatch.setenv("EPOCHS_HOOK", "http://127.0.0.1:9/hooks/scheduledHookSecret")
    res = cli("schedule", "apply", "tests/support/jobs/epochs.yaml", "--cron", "0 3 * * *", "--storage",
              "s3://bucket/runs", "--output", "json")
    assert res.code == 0, res.err
    assert "scheduledHookSecret" not in res.out + res.err
    (schedule,) = cli.fake._schedules.values()
    config = schedule.config
    env = config.runtime_env.env_vars
    planned = env[contract.ENV_PLANNED_ID]
    assert config.entrypoint.startswith('export RTJOB_PIPELINE_ID="${ANYSCALE_HA_JOB_ID:-epochs-')
    assert config.entrypoint.endswith('python -m rtjob.runside.supervisor "$RTJOB_PIPELINE_ID" ray')
    steps = json.loads(env[contract.ENV_PIPELINE_STEPS])
    assert [s["submission_id"] for s in steps] == [f"{planned}-train", f"{planned}-use"]
    assert env[contract.ENV_RUN_URI] == f"s3://bucket/runs/epochs/{planned}" and env[contract.ENV_SCHEDULE] == "epochs"

    job = cli.fake.submit_job(CreateInternalProductionJob(  # what a trigger starts (the fake only counts them)
        name=schedule.name, project_id=schedule.project_id, config=config,
        local_vars_configuration=cli.fake.OPENAPI_NO_VALIDATION))
    runs = json.loads(cli("list", "--backend", "anyscale", "--output", "json").out)
    assert [(r["id"], r["job"], r["storage_uri"]) for r in runs] == [(job.id, "epochs",
                                                                        f"s3://bucket/runs/epochs/{job.id}")]
    # Its driver takes that id in the planned one's place: its steps, their folders, its own folder.
    there = dict(env)
    assert take_run_id(there, job.id) == f"s3://bucket/runs/epochs/{job.id}"
    steps = json.loads(there[contract.ENV_PIPELINE_STEPS])
    assert [s["submission_id"] for s in steps] == [f"{job.id}-train", f"{job.id}-use"]
    assert steps[1]["runtime_env"]["env_vars"][contract.ENV_INPUT_URI] == \
        f"s3://bucket/runs/epochs-train/{job.id}-train"
    assert planned not in json.dumps({k: v for k, v in there.items() if k != contract.ENV_PLANNED_ID})
