"""The Anyscale backend, offline: rtjob's real CLI (in-process) → rtjob's adapter → the anyscale SDK as
shipped → the SDK's own FakeAnyscaleClient and FakeTimer (tests/fake_anyscale.py: its known faults fixed
the way the real API behaves, each named there). A `Timeline` plays the control plane, moving the job
through Anyscale's states, adding job runs and their logs; the exit codes, JSON and printed logs are
rtjob's own.

Logs: the fake serves a job run's log through the SDK's `get_logs` (`add_job_run_logs`), so following is
tested for real, with one limit: the fake has no log *stream* (neither has the SDK's public API), so each
poll reads the whole log and rtjob skips the lines it has printed.

The missing-token path and the dry run of the issue's example run the console script's own main with an
environment of their own (support/cli.run_in_process), the rest through the `cli` fixture: importing anyscale
costs seconds per process.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from rtjob.backends.anyscale import client as anyscale_client
from rtjob.backends.anyscale.backend import AnyscaleBackend
from rtjob.main import main
from rtjob.runs.lifecycle import follow, logtail
from support.cli import REPO, base_env, plant, record, run_in_process
from support.companion import inner
from support.fake_anyscale import CLOUD, Step, Timeline
from support.prices import PRICED_AS, dollars, g5_4xlarge, listed
from support.scrub import scrub

if TYPE_CHECKING:  # the anyscale SDK (seconds to import) only where a test runs: in the `cli` fixture
    from support.fake_anyscale import ApiLikeFake

SECRET = "sk-live-0123456789abcdefghijklmn"


@dataclass
class Result:
    code: int
    out: str
    err: str


class Cli:
    def __init__(self, fake: ApiLikeFake, capsys: pytest.CaptureFixture[str]) -> None:
        self.fake, self.capsys = fake, capsys

    def __call__(self, *args: str) -> Result:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = self.capsys.readouterr()
        record(captured.out, captured.err)  # for the suite-wide check that no planted secret is ever printed
        return Result(code, captured.out, captured.err)

    def timeline(self, *steps: Step) -> Timeline:
        return Timeline(self.fake, list(steps))


@pytest.fixture(name="cli")
def cli_fixture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The rtjob CLI with the Anyscale backend's client injected: the SDK's fake (a fresh org per test)."""
    from support.fake_anyscale import use_fake

    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "rtjob-home"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.anyscale/credentials.json, no ~/.ray
    # The runs write s3://bucket with the (fake) Anyscale cluster's own role: this client has no credentials for
    # it, so its storage check is off, as a user of such a cluster sets it (runs/lifecycle/storage_check.py).
    monkeypatch.setenv("RTJOB_STORAGE_CHECK", "false")
    monkeypatch.chdir(REPO)
    fake = use_fake(monkeypatch)
    # Speed only: follow polls every second and the adapter reads Anyscale at most every 5 s.
    monkeypatch.setattr(follow, "POLL_S", 0.01)
    monkeypatch.setattr(logtail, "RECONNECT_S", 0.01)
    monkeypatch.setattr(AnyscaleBackend, "log_poll_s", 0.01)
    return Cli(fake, capsys)


SUBMIT = ("submit", "ddp-resnet", "--backend", "anyscale", "--nodes", "3", "--storage", "s3://bucket/runs")
LINES = [f"epoch {i}: loss {1.0 / (i + 1):.3f}" for i in range(6)]


def _ok_timeline(cli: Cli) -> Timeline:
    return cli.timeline(
        Step("PENDING"),
        Step("AWAITING_CLUSTER_START", minutes=4),
        Step("RUNNING", "RUNNING", "\n".join(LINES[:2]) + "\n", new_run=True),
        Step("RUNNING", "RUNNING", "\n".join(LINES[2:5]) + "\n", minutes=10),
        Step("SUCCESS", "SUCCEEDED", LINES[5], minutes=15),  # the last line has no newline
    )


def test_submit_follows_to_success_with_logs_json_and_the_exact_request(cli: Cli) -> None:
    _ok_timeline(cli)
    res = cli(*SUBMIT, "--submission-id", "nightly-1", "--env", f"WANDB_API_KEY={SECRET}", "--output", "json")
    assert res.code == 0, res.err
    run = json.loads(res.out)
    assert run["id"] == "nightly-1" and run["backend"] == "anyscale" and run["status"] == "SUCCEEDED"
    assert run["job"] == "ddp-resnet" and run["storage_uri"] == "s3://bucket/runs/ddp-resnet/nightly-1"
    assert run["address"].endswith(f"/jobs/{next(iter(cli.fake._jobs))}")
    # --output json: the followed log goes to stderr, each line once, in order (the last one too).
    log = [line for line in res.err.splitlines() if line.startswith("epoch ")]
    assert log == LINES
    assert f"cost: est. {dollars(g5_4xlarge(3))}/h" in res.err and PRICED_AS in res.err
    assert SECRET not in res.out + res.err
    # What reached Anyscale: the pinned compute config, explicit retries/timeout, tags, the real secret.
    sent = cli.fake.submitted_job
    assert sent.name == "nightly-1"
    assert sent.config.max_retries == 0 and sent.config.timeout_s == 7200
    assert sent.config.runtime_env.env_vars["WANDB_API_KEY"] == SECRET
    assert sent.config.runtime_env.env_vars["RTJOB_NUM_WORKERS"] == "3"
    assert sent.tags["rtjob-run-id"] == "nightly-1"
    assert sent.tags["rtjob-storage"] == "s3://bucket/runs/ddp-resnet/nightly-1"
    compute = cli.fake.get_compute_config(sent.config.compute_config_id).config
    gpu = [g for g in compute.worker_node_types if g.instance_type == "g5.4xlarge"]
    assert len(gpu) == 1 and gpu[0].min_workers == 3 and gpu[0].max_workers == 3
    assert compute.head_node_type.instance_type == "m5.2xlarge"
    # The working dir and the run-side companion's packages (py_modules), packaged by the SDK; the entrypoint
    # runs under the companion.
    assert cli.fake.uploaded_dirs == [str(REPO), str(REPO / "cli" / "rtjob"), str(REPO / "rtjob_contract")]
    assert inner(sent.config.entrypoint) != sent.config.entrypoint
    assert inner(sent.config.entrypoint).startswith("python -m training.ray_ddp --epochs 3")
    assert sent.config.runtime_env.env_vars["RAY_JOB_STOP_WAIT_TIME_S"] == "30"


@pytest.mark.parametrize(("final", "run_status", "status", "code"), [
    ("SUCCESS", "SUCCEEDED", "SUCCEEDED", 0),
    ("OUT_OF_RETRIES", "FAILED", "FAILED", 1),
    ("BROKEN", "FAILED", "FAILED", 1),
    ("TERMINATED", "FAILED", "STOPPED", 1),
])
def test_terminal_states_drive_exit_codes(cli: Cli, final: str, run_status: str, status: str, code: int) -> None:
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "working\n", new_run=True),
                 Step(final, run_status, minutes=3))
    res = cli(*SUBMIT, "--submission-id", f"t-{final.lower()}", "--output", "json")
    assert res.code == code, res.err
    assert json.loads(res.out)["status"] == status
    assert f"t-{final.lower()} {status} after" in res.err
    assert "Traceback" not in res.err


def test_retries_are_reported_and_a_retry_in_progress_is_still_running(cli: Cli) -> None:
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "attempt 1\n", new_run=True),
                 Step("ERRORED", "FAILED"),  # Anyscale: ERRORED with retries left is still RUNNING
                 Step("RESTARTING", "RUNNING", "attempt 2\n", new_run=True),
                 Step("SUCCESS", "SUCCEEDED"))
    res = cli(*SUBMIT, "--submission-id", "retry-1", "--set", "max_retries=1", "--output", "json")
    assert res.code == 0, res.err
    run = json.loads(res.out)
    assert run["status"] == "SUCCEEDED"
    assert "2 attempt(s), 1 failed (max_retries=1)" in run["message"]
    assert cli.fake.submitted_job.config.max_retries == 1


def test_timeout_exits_4_and_leaves_the_job_running(cli: Cli) -> None:
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "still going\n", new_run=True))
    res = cli(*SUBMIT, "--submission-id", "slow-1", "--timeout", "0.3s")
    assert res.code == 4, res.err
    # "still RUNNING", or "still running" where the 0.3 s ran out before the first status read (a busy machine,
    # packaging this repository's working dir): either way, left running.
    assert "after the --timeout; it was left running" in res.err and "rtjob wait slow-1" in res.err
    assert not cli.fake.terminated
    # `rtjob wait` with its own timeout: 4 again (never the SDK's 30-minute default).
    wait = cli("wait", "slow-1", "--backend", "anyscale", "--timeout", "0.2")
    assert wait.code == 4


def test_no_wait_then_status_logs_wait_list_and_cost(cli: Cli) -> None:
    _ok_timeline(cli)
    res = cli(*SUBMIT, "--submission-id", "later-1", "--no-wait", "--output", "json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["status"] in ("PENDING", "RUNNING")
    wait = cli("wait", "later-1", "--backend", "anyscale", "--timeout", "1m", "--output", "json")
    assert wait.code == 0, wait.err
    assert json.loads(wait.out)["status"] == "SUCCEEDED"
    logs = cli("logs", "later-1", "--backend", "anyscale")
    assert logs.code == 0 and logs.out.splitlines() == LINES
    status = cli("status", "later-1", "--backend", "anyscale", "--output", "json")
    data = json.loads(status.out)
    assert data["status"] == "SUCCEEDED" and data["end_time"] and data["start_time"]
    # Duration (submit → SUCCESS: 1 + 4 + 1 + 10 + 15 = 31 minutes of control-plane time) × rate.
    assert data["cost"]["hours"] == pytest.approx(31 / 60, abs=1e-3)
    assert data["cost"]["estimated_usd"] == pytest.approx(31 / 60 * g5_4xlarge(3), abs=0.01)
    assert PRICED_AS in data["cost"]["rate"]["basis"]
    text = cli("status", "later-1", "--backend", "anyscale")
    assert (f"cost:        est. {dollars(31 / 60 * g5_4xlarge(3))} (0h31m × {dollars(g5_4xlarge(3))}/h; AWS on-demand "
            f"prices, {PRICED_AS}") in text.out
    listed = cli("list", "--backend", "anyscale", "--output", "json")
    assert [r["id"] for r in json.loads(listed.out)] == ["later-1"]
    # The Anyscale job id works as a run id too.
    job_id = next(iter(cli.fake._jobs))
    assert json.loads(cli("status", job_id, "--backend", "anyscale", "--output", "json").out)["id"] == "later-1"


def test_backend_default_from_the_environment(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTJOB_BACKEND", "anyscale")
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "hi\n", new_run=True), Step("SUCCESS", "SUCCEEDED"))
    res = cli("submit", "hello", "--submission-id", "env-1", "--output", "json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["backend"] == "anyscale"
    assert "no compute config: Anyscale uses the cloud's default one" in res.err
    assert json.loads(cli("status", "env-1", "--output", "json").out)["status"] == "SUCCEEDED"


def test_stop_terminates_and_waits_with_rtjobs_limit(cli: Cli) -> None:
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "busy\n", new_run=True))
    assert cli(*SUBMIT, "--submission-id", "stop-me", "--no-wait").code == 0
    res = cli("stop", "stop-me", "--backend", "anyscale", "--output", "json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["status"] == "STOPPED"
    assert cli.fake.terminated == [next(iter(cli.fake._jobs))]
    assert cli("wait", "stop-me", "--backend", "anyscale", "--timeout", "10s").code == 1


def test_status_logs_wait_and_stop_of_a_known_run_go_to_the_backend_that_ran_it(cli: Cli) -> None:
    """The ledger knows the run ran on Anyscale: no --backend needed (the default here is the embedded cluster);
    an explicit flag still wins."""
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "busy\n", new_run=True))
    assert cli(*SUBMIT, "--submission-id", "known-1", "--no-wait").code == 0
    status = cli("status", "known-1", "--output", "json")
    assert status.code == 0, status.err
    assert json.loads(status.out)["backend"] == "anyscale" and "from the run record" not in status.err
    logs = cli("logs", "known-1")
    assert logs.code == 0 and logs.out.strip() == "busy", logs.err
    stopped = cli("stop", "known-1", "--output", "json")
    assert stopped.code == 0 and json.loads(stopped.out)["status"] == "STOPPED", stopped.err
    assert cli.fake.terminated == [next(iter(cli.fake._jobs))]
    waited = cli("wait", "known-1", "--timeout", "10s", "--output", "json")
    assert waited.code == 1 and json.loads(waited.out)["backend"] == "anyscale", waited.err
    elsewhere = cli("status", "known-1", "--backend", "local", "--output", "json")
    assert "backend 'local' does not know this run now" in elsewhere.err


def test_logs_tail_and_delete_through_the_sdk(cli: Cli) -> None:
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "busy\n", new_run=True))
    assert cli(*SUBMIT, "--submission-id", "busy-1", "--no-wait").code == 0
    running = cli("delete", "busy-1", "--backend", "anyscale")
    assert running.code == 2 and "stop it first: rtjob stop busy-1" in running.err and not cli.fake._deleted_jobs
    _ok_timeline(cli)
    assert cli(*SUBMIT, "--submission-id", "done-1").code == 0
    tail = cli("logs", "done-1", "--backend", "anyscale", "--tail", "2")
    assert tail.code == 0 and tail.out.splitlines() == LINES[-2:], tail.out
    deleted = cli("delete", "done-1", "--backend", "anyscale")
    assert deleted.code == 0 and "done-1: deleted" in deleted.err and len(cli.fake._deleted_jobs) == 1
    # Anyscale no longer knows it; rtjob's run ledger does (its status and its archived log).
    gone = cli("status", "done-1", "--backend", "anyscale", "--output", "json")
    assert gone.code == 0 and json.loads(gone.out)["status"] == "SUCCEEDED" and "from the run record" in gone.err
    assert cli("logs", "done-1", "--backend", "anyscale").out.splitlines() == LINES
    assert cli("status", "never-1", "--backend", "anyscale").code == 2


def test_runs_show_and_rerun_remember_an_anyscale_run(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _ok_timeline(cli)
    res = cli(*SUBMIT, "--submission-id", "hist-1", "--env", f"WANDB_API_KEY={SECRET}")
    assert res.code == 0, res.err
    runs = json.loads(cli("runs", "--backend", "anyscale", "-o", "json").out)
    assert [(r["id"], r["status"], r["archived"]) for r in runs] == [("hist-1", "SUCCEEDED", True)]
    shown = cli("show", "hist-1", "-o", "json")
    record = json.loads(shown.out)
    assert record["backend"] == "anyscale" and record["shape"]["nodes"] == 3
    assert record["cost"]["estimated_usd"] > 0 and record["logs"] == ["logs/driver.log"]
    assert record["spec"]["document"]["name"] == "ddp-resnet" and record["spec_hash"]
    assert SECRET not in shown.out + shown.err
    # The same request again, the secret found in this environment (never in the record).
    missing = cli("rerun", "hist-1", "--dry-run", "-o", "json")
    assert missing.code == 2 and "WANDB_API_KEY" in missing.err and missing.err.count("\n") == 1
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    again = cli("rerun", "hist-1", "--dry-run", "-o", "json", "--submission-id", "hist-2")
    assert again.code == 0, again.err
    assert "differs" not in again.err
    expected = json.loads(json.dumps(record["request"]).replace("hist-1", "hist-2"))
    rendered = json.loads(again.out)
    assert {k: rendered[k] for k in expected} == expected


def test_submit_with_an_existing_id_attaches_instead_of_submitting_twice(cli: Cli) -> None:
    _ok_timeline(cli)
    assert cli(*SUBMIT, "--submission-id", "once", "--no-wait").code == 0
    again = cli(*SUBMIT, "--submission-id", "once", "--output", "json")
    assert again.code == 0, again.err
    assert "already exists" in again.err and "attaching" in again.err
    assert len(cli.fake._jobs) == 1


def test_unknown_run_and_compute_config_are_bad_input(cli: Cli) -> None:
    res = cli("status", "no-such-run", "--backend", "anyscale")
    assert res.code == 2 and res.err.count("\n") == 1 and "no run 'no-such-run' on Anyscale" in res.err
    res = cli("render", "ddp-resnet", "--backend", "anyscale", "--compute-config", "g5-4xlarg")
    assert res.code == 2 and "unknown compute config 'g5-4xlarg'" in res.err and "did you mean" in res.err
    # A registered name goes to Anyscale as it is; one Anyscale does not know is bad input there.
    res = cli("render", "ddp-resnet", "--backend", "anyscale", "--compute-config", "anyscale:gpu-a10g:2",
              "--output", "json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["job_config"]["compute_config"] == "gpu-a10g:2"
    res = cli(*SUBMIT, "--compute-config", "anyscale:gpu-a10g:2")
    assert res.code == 2 and "compute config 'gpu-a10g:2' does not exist" in res.err
    res = cli("submit", "hello", "--backend", "anyscale", "--set", "cloud=no-such-cloud")
    assert res.code == 2 and "Cloud with name 'no-such-cloud' not found" in res.err
    assert "Traceback" not in res.err and not cli.fake._jobs


def test_registered_compute_config_round_trip(cli: Cli) -> None:
    res = cli("compute-config", "apply", "g5-4xlarge", "--nodes", "2")
    assert res.code == 0, res.err
    assert res.out.strip() == "g5-4xlarge:1"
    assert "--compute-config anyscale:g5-4xlarge:1" in res.err and f"{dollars(g5_4xlarge(2))}/h" in res.err
    shown = cli("compute-config", "show", "anyscale:g5-4xlarge:1", "--output", "json")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    gpu = [g for g in data["compute_config"]["worker_nodes"] if g["instance_type"] == "g5.4xlarge"]
    assert gpu[0]["min_nodes"] == gpu[0]["max_nodes"] == 2
    assert data["cost"]["usd_per_hour"] == pytest.approx(g5_4xlarge(2))
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "x\n", new_run=True), Step("SUCCESS", "SUCCEEDED"))
    run = cli(*SUBMIT, "--compute-config", "anyscale:g5-4xlarge:1", "--submission-id", "reg-1", "--output", "json")
    assert run.code == 0, run.err
    status = json.loads(cli("status", "reg-1", "--backend", "anyscale", "--output", "json").out)
    assert status["cost"]["rate"]["usd_per_hour"] == pytest.approx(g5_4xlarge(2))  # read back from Anyscale


def test_compute_config_show_pins_nodes_and_is_accepted_by_anyscales_model(cli: Cli) -> None:
    from anyscale.compute_config.models import ComputeConfig

    res = cli("compute-config", "show", "g5-4xlarge", "--nodes", "3")
    assert res.code == 0, res.err
    header = [line for line in res.out.splitlines() if line.startswith("#")]
    assert any("gpu-workers pinned to 3 node(s)" in line for line in header)
    assert any(f"est. {dollars(g5_4xlarge(3))}/h" in line and PRICED_AS in line for line in header)
    data = yaml.safe_load(res.out)
    config = ComputeConfig.from_dict(data)
    assert config.worker_nodes[0].min_nodes == config.worker_nodes[0].max_nodes == 3
    assert cli("compute-config", "show", "nope").code == 2


def test_render_yaml_is_a_file_anyscale_job_submit_accepts(cli: Cli, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered file through Anyscale's own `anyscale job submit -f FILE --env ...` command (its click
    command, in-process), with its job SDK bound to the same fake: the file parses, the masked secret is
    supplied the way the file's header says, and the job reaches the fake with the pinned cluster."""
    from anyscale._private import sdk as anyscale_sdk
    from anyscale._private.sdk.timer import FakeTimer
    from anyscale.cli_logger import BlockLogger
    from anyscale.commands import job_commands
    from anyscale.job._private.job_sdk import PrivateJobSDK
    from anyscale.job.commands import _JOB_SDK_SINGLETON_KEY
    from click.testing import CliRunner

    res = cli("render", "ddp-resnet", "--backend", "anyscale", "--nodes", "3", "--env", f"WANDB_API_KEY={SECRET}",
              "--output", "yaml", "--submission-id", "from-file")
    assert res.code == 0, res.err
    assert SECRET not in res.out and "WANDB_API_KEY: '****'" in res.out
    assert '--env WANDB_API_KEY="$WANDB_API_KEY"' in res.out
    path = tmp_path / "job.yaml"
    path.write_text(res.out)
    job_commands._check_config_schema(str(path), passed_with_config_flag=True)  # the CLI's own schema check
    monkeypatch.setitem(anyscale_sdk._LAZY_SDK_SINGLETONS, _JOB_SDK_SINGLETON_KEY,
                        PrivateJobSDK(client=cli.fake, logger=BlockLogger(log_output=False), timer=FakeTimer()))
    # The legacy-API controller, unused with -f, authenticates when it is constructed.
    monkeypatch.setattr(job_commands, "JobController", lambda: None)
    result = CliRunner().invoke(job_commands.job_cli, ["submit", "-f", str(path), "--env", f"WANDB_API_KEY={SECRET}"])
    assert result.exit_code == 0, result.output
    sent = cli.fake.submitted_job
    assert sent.name == "from-file" and sent.config.runtime_env.env_vars["WANDB_API_KEY"] == SECRET
    compute = cli.fake.get_compute_config(sent.config.compute_config_id).config
    assert [(g.min_workers, g.max_workers) for g in compute.worker_node_types] == [(3, 3)]


def test_dry_run_of_the_issue_example_through_the_real_cli(tmp_path: Path) -> None:
    """`rtjob submit ddp-resnet --nodes 3 --backend anyscale --dry-run`: a JobConfig Anyscale's model accepts,
    the g5.4xlarge group pinned to 3 nodes, and its cost per hour; nothing contacted (no token here)."""
    from anyscale.job.models import JobConfig

    env = base_env(tmp_path / "home", HOME=str(tmp_path / "userhome"))
    env.pop("ANYSCALE_CLI_TOKEN", None)
    text = run_in_process("submit", "ddp-resnet", "--nodes", "3", "--backend", "anyscale", "--dry-run", env=env)
    assert text.returncode == 0, text.stderr
    assert (f"cost:      est. {dollars(g5_4xlarge(3))}/h = head {listed('m5.2xlarge')} + 3 × {listed('g5.4xlarge')}"
            in text.stdout)
    assert PRICED_AS in text.stdout
    assert '"checked_with": "anyscale 0.26.112 JobConfig"' in text.stdout
    data = json.loads(text.stdout[text.stdout.index("request:\n") + 9:text.stdout.index("\nequivalent:")])
    config = JobConfig.from_dict(data["job_config"])
    groups = [g for g in config.compute_config.worker_nodes if g.instance_type == "g5.4xlarge"]
    assert len(groups) == 1 and groups[0].min_nodes == groups[0].max_nodes == 3
    assert config.max_retries == 0 and config.timeout_s == 7200 and config.compute_config.cloud == CLOUD
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").iterdir())


def test_missing_token_is_one_line_exit_3(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home", HOME=str(tmp_path / "userhome"))
    env.pop("ANYSCALE_CLI_TOKEN", None)
    res = run_in_process("submit", "hello", "--backend", "anyscale", env=env)
    assert res.returncode == 3
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("rtjob: uploading working dir ")  # what it was about to upload, then one error
    assert lines[1:] == [
        "rtjob: error: no Anyscale credentials: set ANYSCALE_CLI_TOKEN (in CI, from a secret) or run "
        "`anyscale login` (it writes ~/.anyscale/credentials.json)"
    ]
    assert res.stdout == ""


def test_auth_and_network_errors_are_exit_3_without_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib3
    from anyscale.client.openapi_client.rest import ApiException

    token = "aph0_do-not-print-me-0123456789"
    monkeypatch.setenv(anyscale_client.CREDENTIALS_ENV, token)
    err = RuntimeError("Job with ID 'x' was not found.")  # the SDK wraps every lookup error like this
    err.__cause__ = ApiException(status=401, reason=f"Unauthorized token {token}")
    translated = anyscale_client.translate(err, "reading run x")
    assert translated.exit_code == 3 and "authentication failed" in translated.message
    assert token not in translated.message
    net = anyscale_client.translate(urllib3.exceptions.MaxRetryError(None, "/api", "refused"), "listing jobs")
    assert net.exit_code == 3 and "cannot reach Anyscale" in net.message
    missing = anyscale_client.translate(RuntimeError("Job with ID 'x' was not found."), "reading run x")
    assert missing.exit_code == 2
    assert anyscale_client.translate(KeyError("boom"), "submitting").exit_code == 3  # not "the job failed"


def test_help_stays_free_of_anyscale(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home")
    code = ("import sys, rtjob.main\n"
            "try:\n    rtjob.main.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('anyscale' in sys.modules, 'pydantic' in sys.modules)")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stderr


# -- a pipeline: one Anyscale job whose driver is its supervisor (backends/anyscale/pipeline.py). What that driver
# does on the job's cluster runs for real in tests/e2e/test_anyscale_pipeline.py (the job's config run as a Ray job).

PIPELINE = ("submit", "tests/support/jobs/epochs.yaml", "--backend", "anyscale", "--submission-id", "pipe-1")
HOOK_SECRET = "pipeHookSecret99"


@pytest.fixture(name="pipeline_env")
def pipeline_env_fixture(cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("EPOCHS_HOOK", f"http://127.0.0.1:9/hooks/{HOOK_SECRET}")
    return tmp_path / "store"


def test_a_pipeline_is_one_anyscale_job_whose_driver_runs_the_steps(cli: Cli, pipeline_env: Path) -> None:
    got = cli(*PIPELINE, "--storage", str(pipeline_env), "--env", f"API_TOKEN={SECRET}", "--no-wait", "-o", "json")
    assert got.code == 0, got.err
    assert [j.name for j in cli.fake._jobs.values()] == ["pipe-1-supervisor"]  # the steps are not Anyscale jobs
    sent = cli.fake.submitted_job
    env = sent.config.runtime_env.env_vars
    assert sent.config.entrypoint == "python -m rtjob.runside.supervisor pipe-1 ray"
    steps = json.loads(env["RTJOB_PIPELINE_STEPS"])
    assert [s["submission_id"] for s in steps] == ["pipe-1-train", "pipe-1-use"]
    # Each step: a Ray job on the job's cluster, with the supervisor's own code and the step's retries as rtjob's.
    assert all(s["code"] == "rtjob-supervisor-code" and s["metadata"]["rtjob.max_retries"] == "1" for s in steps)
    assert steps[0]["runtime_env"]["env_vars"]["API_TOKEN"] == SECRET
    assert env["RTJOB_RUN_URI"] == f"{pipeline_env}/epochs/pipe-1" and env["RTJOB_SUPERVISOR_EXIT"] == "outcome"
    assert "RTJOB_RUN_NAME" not in env and sent.config.max_retries == 1
    assert sent.tags["rtjob-role"] == "supervisor" and sent.tags["rtjob-supervises"] == "pipe-1"
    assert SECRET not in got.out + got.err and HOOK_SECRET not in got.out + got.err
    # The notify URL only the client holds: in the job's sealed package (the supervisor's own env.json, and each
    # step's entry of steps.json, which the supervisor seals again for that step), never in the JobConfig.
    assert HOOK_SECRET not in repr(sent.config) and all("sealed_step" in s for s in steps)
    [folder] = [d for d in cli.fake.uploaded_dirs if d.endswith("rtjob_sealed")]
    assert any(HOOK_SECRET in v for v in json.loads((Path(folder) / "env.json").read_text()).values())
    sealed_steps = json.loads((Path(folder) / "steps.json").read_text())
    assert [s["sealed_step"] for s in steps] == [0, 1] and len(sealed_steps) == 2
    assert all(any(HOOK_SECRET in v for v in step["env"].values()) for step in sealed_steps)
    listed = cli("list", "--backend", "anyscale", "-o", "json")
    assert listed.code == 0 and json.loads(listed.out) == []  # rtjob's own job, not a run of the user's
    again = cli(*PIPELINE, "--storage", str(pipeline_env), "--no-wait")
    assert again.code == 0 and len(cli.fake._jobs) == 1, again.err  # the same id attaches
    shown = cli("render", *PIPELINE[1:], "--storage", str(pipeline_env), "--env", f"API_TOKEN={SECRET}", "-o", "json")
    preview = json.loads(shown.out)["supervisor"]["job_config"]
    assert preview["name"] == "pipe-1-supervisor" and SECRET not in shown.out and HOOK_SECRET not in shown.out


def test_a_pipeline_whose_steps_need_different_clusters_is_refused_in_one_line(cli: Cli, pipeline_env: Path) -> None:
    got = cli(*PIPELINE, "--storage", str(pipeline_env), "--set", "use.compute_config=g5-12xlarge")
    assert got.code == 2 and len(got.err.strip().splitlines()) == 1, got.err
    assert "steps need one compute config; step use differs from step train" in got.err
    assert cli.fake._jobs == {}
    # Node counts may differ: the job's cluster autoscales between the fewest and the most nodes a step asks for.
    shown = cli("render", "voice-clone", "--backend", "anyscale", "--storage", str(pipeline_env), "-o", "json")
    assert shown.code == 0, shown.err
    groups = json.loads(shown.out)["supervisor"]["job_config"]["compute_config"]["worker_nodes"]
    assert [(g["min_nodes"], g["max_nodes"]) for g in groups] == [(1, 2)]


def _record_steps(store: Path, statuses: dict[str, str]) -> None:
    """The steps' records as their companions write them on the job's cluster, and the pipeline's end as its
    supervisor writes it (the run side's own code, on this machine's storage)."""
    from rtjob.core.record import RunRecord
    from rtjob.runside.supervisor.pipeline_folder import PipelineFolder
    from support.planted import plant_record

    if (store / "epochs" / "pipe-1" / "rtjob-notified-succeeded").exists() or (store / "epochs-use").exists():
        return  # once
    for step, status in statuses.items():
        uri = f"{store}/epochs-{step}/pipe-1-{step}"
        plant_record(uri, RunRecord(id=f"pipe-1-{step}", job=f"epochs-{step}", backend="anyscale", status=status,
                                    storage_uri=uri), None)
    with contextlib.redirect_stdout(io.StringIO()):  # its log lines (the job's driver log there)
        PipelineFolder("pipe-1", f"{store}/epochs/pipe-1").ended({f"pipe-1-{s}": st for s, st in statuses.items()},
                                                                 None)


def test_a_followed_pipeline_ends_as_its_supervisor_recorded_with_steps_from_storage(cli: Cli,
                                                                                    pipeline_env: Path) -> None:
    timeline = cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "carrying\n", new_run=True),
                            Step("RUNNING", "RUNNING"), Step("SUCCESS", "SUCCEEDED", "pipeline SUCCEEDED\n"))
    timeline.fake.on_get_job.insert(0, lambda _: timeline.reads == 2 and _record_steps(
        pipeline_env, {"train": "SUCCEEDED", "use": "SUCCEEDED"}))
    got = cli(*PIPELINE, "--storage", str(pipeline_env), "-o", "json")
    assert got.code == 0, got.err
    assert json.loads(got.out)["status"] == "SUCCEEDED", got.out
    assert "step 1/2 train: pipe-1-train SUCCEEDED" in got.err
    status = json.loads(cli("status", "pipe-1", "-o", "json").out)
    assert status["status"] == "SUCCEEDED" and [s["status"] for s in status["steps"]] == ["SUCCEEDED"] * 2


def test_a_pipeline_job_that_ended_without_recording_its_end_is_failed_not_succeeded(cli: Cli,
                                                                                    pipeline_env: Path) -> None:
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "x\n", new_run=True),
                 Step("OUT_OF_RETRIES", "FAILED", "Traceback: no storage\n"))
    got = cli(*PIPELINE, "--storage", str(pipeline_env), "-o", "json")
    assert got.code == 1, got.err
    assert json.loads(got.out)["status"] == "FAILED"
    assert "pipe-1-supervisor ended FAILED without recording the pipeline's end" in got.err


def test_a_queued_run_goes_to_anyscales_job_queue_with_its_priority_in_anyscales_order(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """queue/priority render the JobConfig's job_queue_config (backends/anyscale/queue.py's rule: Anyscale's priority
    = 1000 - rtjob's, 0 the highest), the SDK's own JobConfig model accepts it, and the SDK carries it to the fake."""
    write_config = tmp_path / "xdg" / "rtjob" / "config.toml"
    write_config.parent.mkdir(parents=True)
    write_config.write_text('[contexts.team]\nbackend = "anyscale"\n\n[contexts.team.queues.team]\n'
                            'anyscale_queue = "g5-priority"\n\n[contexts.team.queues.cpu]\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RTJOB_CONTEXT", "team")
    rendered = cli("render", "ddp-resnet", "--queue", "team", "--priority", "10", "-o", "json")
    assert rendered.code == 0, rendered.err
    data = json.loads(rendered.out)
    assert data["job_config"]["job_queue_config"] == {"target_job_queue_name": "g5-priority", "priority": 990}
    assert data["job_config"]["tags"]["rtjob-queue"] == "team"
    assert data["run"]["queue"]["name"] == "team"
    _ok_timeline(cli)
    res = cli(*SUBMIT, "--queue", "cpu", "--priority", "1000", "--submission-id", "queued-1", "--no-wait")
    assert res.code == 0, res.err
    sent = cli.fake.submitted_job.job_queue_config
    assert (sent.target_job_queue_name, sent.priority) == ("cpu", 0)  # rtjob's highest is Anyscale's 0
    low = cli("render", "ddp-resnet", "--queue", "cpu", "--priority", "-1000", "-o", "json")
    assert json.loads(low.out)["job_config"]["job_queue_config"]["priority"] == 2000
    out_of_range = cli("render", "ddp-resnet", "--queue", "cpu", "--priority", "1001")
    assert out_of_range.code == 2 and "--priority: a priority is an integer from -1000 to 1000" in out_of_range.err
    listed = cli("queue", "cpu", "-o", "json")  # what the SDK says: the run sent to the queue, no position given
    assert listed.code == 0, listed.err
    assert [(r["id"], r["position"], r["priority"]) for r in json.loads(listed.out)] == [("queued-1", None, 1000)]
    assert "unknown" in cli("queue", "cpu").out

    # A teammate's run in the same queue (sent from another machine: this ledger never saw it) is listed too, as
    # the SDK lists it with rtjob's queue tag, its priority mapped back from Anyscale's order.
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "teammate-home"))
    assert cli(*SUBMIT, "--queue", "cpu", "--priority", "5", "--submission-id", "queued-2", "--no-wait").code == 0
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "rtjob-home"))
    both = cli("queue", "cpu", "-o", "json")
    assert both.code == 0, both.err
    rows = {r["id"]: r for r in json.loads(both.out)}
    assert set(rows) == {"queued-1", "queued-2"} and rows["queued-2"]["priority"] == 5, rows
    assert rows["queued-2"]["job"] == "ddp-resnet" and rows["queued-2"]["position"] is None


def test_secrets_resolved_on_the_node_travel_as_references_and_a_client_held_one_is_sealed(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45 on Anyscale: aws-sm://, ssm:// and file:// references go in the JobConfig as references only (the
    companion resolves them on the driver's node and gives them to the run's Ray workers through the job config Ray
    gives the entrypoint: runside/child_env.py, tested for real in test_anyscale_pipeline.py). An env: reference's
    value, which only this client holds, and the forwarded AWS credentials travel in the sealed package: a py_modules
    folder the SDK uploads at submit (the fake keeps its bytes, as the cloud's storage would), never the JobConfig;
    render names them, never their values. A schedule seals them at apply the same way."""
    jobs = tmp_path / "project" / "jobs"  # the cli fixture's HOME is under tmp_path: the project is a folder of it
    jobs.mkdir(parents=True)
    refs = {"HF_TOKEN": "aws-sm://team/hf#token", "DB_PASSWORD": "ssm://team/db", "CERT": "file:///etc/team/cert"}
    (jobs / "sec.yaml").write_text("name: sec\nentrypoint: python -c \"print('hi')\"\nsecrets:\n"
                                   + "".join(f"  {k}: {v}\n" for k, v in refs.items()))
    rendered = cli("render", str(jobs / "sec.yaml"), "--backend", "anyscale", "-o", "json")
    assert rendered.code == 0, rendered.err
    assert json.loads(json.loads(rendered.out)["job_config"]["env_vars"]["RTJOB_SECRET_REFS"]) == refs
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "hi\n", new_run=True), Step("SUCCESS", "SUCCEEDED", ""))
    sent = cli("submit", str(jobs / "sec.yaml"), "--backend", "anyscale", "--submission-id", "sec-1", "--no-wait")
    assert sent.code == 0, sent.err
    env = cli.fake.submitted_job.config.runtime_env.env_vars
    assert json.loads(env["RTJOB_SECRET_REFS"]) == refs and not set(refs) & set(env)
    assert not any(d.endswith("rtjob_sealed") for d in cli.fake.uploaded_dirs)  # nothing to seal
    modules = len(cli.fake.submitted_job.config.runtime_env.py_modules)  # rtjob's own

    token, key = plant("anyscale-held-token-5f4e3d"), plant("anyscale-forwarded-key-9a8b7c")
    monkeypatch.setenv("MY_HF_TOKEN", token)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAHELDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key)
    (jobs / "held.yaml").write_text("name: held\nentrypoint: python -c \"print('hi')\"\nsecrets:\n"
                                    "  HF_TOKEN: env:MY_HF_TOKEN\n")
    args = (str(jobs / "held.yaml"), "--backend", "anyscale", "--storage", "s3://bucket/runs",
            "--forward-aws-credentials")
    rendered = cli("render", *args, "-o", "json")
    assert rendered.code == 0, rendered.err
    shown = json.loads(rendered.out)["job_config"]["py_modules"]
    assert shown[-1] == "rtjob_sealed/ (sealed: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, HF_TOKEN)", shown
    assert token not in rendered.out and key not in rendered.out
    cli.timeline(Step("PENDING"), Step("RUNNING", "RUNNING", "hi\n", new_run=True), Step("SUCCESS", "SUCCEEDED", ""))
    sent = cli("submit", *args, "--submission-id", "held-1", "--no-wait")
    assert sent.code == 0, sent.err
    config = cli.fake.submitted_job.config
    [folder] = [d for d in cli.fake.uploaded_dirs if d.endswith("rtjob_sealed")]
    assert len(config.runtime_env.py_modules) == modules + 1  # + the sealed package's URI
    assert json.loads((Path(folder) / "values.json").read_text()) == {"HF_TOKEN": token}  # what the cloud holds
    assert json.loads((Path(folder) / "env.json").read_text())["AWS_SECRET_ACCESS_KEY"] == key
    env = config.runtime_env.env_vars
    assert "AWS_SECRET_ACCESS_KEY" not in env and "HF_TOKEN" not in env
    assert json.loads(env["RTJOB_SECRET_REFS"]) == {"HF_TOKEN": "env:MY_HF_TOKEN"}
    assert token not in repr(config) + sent.out + sent.err and key not in repr(config) + sent.out + sent.err

    # A schedule takes them at apply, as a submit does: each job it starts carries the package's URI, no value.
    scheduled = (str(jobs / "held.yaml"), "--storage", "s3://bucket/runs", "--cron", "0 3 * * *")  # on Anyscale
    shown = cli("schedule", "apply", *scheduled, "--dry-run", "-o", "json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["schedule"]["job_config"]["py_modules"][-1] == "rtjob_sealed/ (sealed: HF_TOKEN)"
    applied = cli("schedule", "apply", *scheduled, "--name", "nightly-held")
    assert applied.code == 0, applied.err
    [schedule] = [s for s in cli.fake._schedules.values() if s.name == "nightly-held"]
    [folder, _] = [d for d in cli.fake.uploaded_dirs if d.endswith("rtjob_sealed")][::-1]
    assert json.loads((Path(folder) / "values.json").read_text()) == {"HF_TOKEN": token}
    kept = repr(schedule) + shown.out + shown.err + applied.out + applied.err
    assert token not in kept and key not in kept and "HF_TOKEN" not in schedule.config.runtime_env.env_vars
    assert len(schedule.config.runtime_env.py_modules) == modules + 1  # + the sealed package's URI
