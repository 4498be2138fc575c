"""`rtjob schedule ...` offline: cron and time-zone checks before anything is sent, and apply / list /
pause / resume / trigger / delete through rtjob's adapter and the anyscale SDK as shipped, against the
SDK's FakeAnyscaleClient (tests/fake_anyscale.py: its known faults fixed as the real API behaves)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml
from rtjob.backends.anyscale import client as anyscale_client
from rtjob.core.errors import BadInput
from rtjob.spec.cron import next_runs, validate_cron, validate_timezone
from support.fake_anyscale import ApiLikeFake
from test_anyscale_backend import Cli, cli_fixture  # noqa: F401 - the in-process CLI fixture, `cli`

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
    assert "cost per hour of a run: est. $5.26/h" in res.out
    assert "hf_abcdefghijklmnop" not in res.out
    data = yaml.safe_load(res.out)
    config = ScheduleConfig.from_dict(data)
    assert config.cron_expression == "0 3 * * 1" and config.timezone == "Europe/Berlin"
    job = config.job_config
    assert job.name == "weekly-ddp" and job.max_retries == 0 and job.timeout_s == 7200
    assert job.env_vars["RTJOB_SCHEDULE"] == "weekly-ddp" and "RTJOB_RUN_NAME" not in job.env_vars
    assert job.entrypoint.startswith('export RTJOB_RUN_NAME="${ANYSCALE_HA_JOB_ID:-weekly-ddp-')
    assert job.entrypoint.endswith("python -m training.ray_ddp --epochs 3 --global-batch-size 128 --lr 0.001 "
                                   "--dataset mnist")
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
