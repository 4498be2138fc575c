"""`tracking:` in a job file (issue 46): what the run side gets (RTJOB_TRACKING: the MLflow address, the args as
params less every secret one, rtjob's tags and MLflow's standard ones, the git commit), MLflow's own
MLFLOW_TRACKING_URI turning it on, `render --explain` saying which applies, and bad input as one file:line (exit 2):
an address with a password is refused, a tracker's token in env_vars is refused, a W&B project is checked. The rows as MLflow metrics (trackers/rows.py). Offline: render in this
process, no tracker contacted. The mirror itself is tested against a real MLflow server in
tests/e2e/test_tracking.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from rtjob.runs.tracking_view import tracking_lines
from rtjob.trackers.rows import SystemSteps, epoch_metrics, epoch_step
from rtjob.trackers.rows import step_metrics as metrics_of
from support.cli import plant, run_in_process
from support.scrub import scrubbed_environ

import rtjob_contract as contract

NOWHERE = "http://127.0.0.1:9"
PASSWORD = plant("hunter2tracking")
TRACKING = "tracking:\n  mlflow:\n    tracking_uri: http://127.0.0.1:5999/\n    experiment: team-x\n"
ARGS = f"args:\n  lr: 0.1\n  layers: [2, 3]\n  db_password: {PASSWORD}\n"


def _render(tmp_path: Path, body: str, *flags: str, output: str = "json", config: str = "", **env: str
            ) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True, exist_ok=True)
    (project / "jobs" / "t.yaml").write_text(f"name: t\nentrypoint: python -c pass\n{body}")
    (project / "pyproject.toml").write_text(f"[tool.rtjob]\n{config}")
    environ = scrubbed_environ()
    environ.update(RTJOB_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), **env)
    return run_in_process("render", "t", "--backend", "ray", "--address", NOWHERE, "--submission-id", "t-1",
                          "--output", output, *flags, env=environ, cwd=project)


def _tracking(proc: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    assert proc.returncode == 0, proc.stderr
    raw = json.loads(proc.stdout)["submit_job"]["runtime_env"]["env_vars"].get(contract.ENV_TRACKING)
    return json.loads(raw) if raw else None


def test_the_run_side_gets_the_address_the_params_less_secrets_and_the_tags(tmp_path: Path) -> None:
    proc = _render(tmp_path, TRACKING + ARGS)
    tracking = _tracking(proc)
    assert tracking is not None
    assert tracking["mlflow"] == {"tracking_uri": "http://127.0.0.1:5999", "experiment": "team-x"}
    assert tracking["params"] == {"lr": "0.1", "layers": "[2, 3]"}  # db_password: secret by name, never there
    assert tracking["tags"]["rtjob.job"] == "t" and tracking["tags"]["rtjob.backend"] == "ray"
    assert PASSWORD not in proc.stdout + proc.stderr
    spelled = _tracking(_render(tmp_path, TRACKING.replace("tracking_uri:", "uri:")))  # the issue's own spelling
    assert spelled is not None and spelled["mlflow"]["tracking_uri"] == "http://127.0.0.1:5999"
    overridden = _tracking(_render(tmp_path, TRACKING + ARGS, "--set", "args.lr=0.5", "--set", "args.seed=7"))
    assert overridden is not None and overridden["params"] == {"lr": "0.5", "layers": "[2, 3]", "seed": "7"}


def test_mlflows_own_variables_turn_it_on_and_the_job_file_wins(tmp_path: Path) -> None:
    assert _tracking(_render(tmp_path, ARGS)) is None  # nothing asked: no RTJOB_TRACKING
    by_env = _tracking(_render(tmp_path, ARGS, MLFLOW_TRACKING_URI="http://127.0.0.1:5001",
                               MLFLOW_EXPERIMENT_NAME="from-env"))
    assert by_env is not None and by_env["mlflow"] == {"tracking_uri": "http://127.0.0.1:5001",
                                                       "experiment": "from-env"}
    assert _tracking(_render(tmp_path, ARGS, MLFLOW_TRACKING_URI="file:///tmp/mlruns")) is None  # not a server
    job_wins = _tracking(_render(tmp_path, TRACKING, MLFLOW_TRACKING_URI="http://127.0.0.1:5001"))
    assert job_wins is not None and job_wins["mlflow"]["experiment"] == "team-x"


def test_the_project_config_or_a_context_turns_it_on_and_a_jobs_own_block_wins_whole(tmp_path: Path) -> None:
    config = '[tool.rtjob.tracking]\nmlflow = {tracking_uri = "http://127.0.0.1:5002", experiment = "team"}\n'
    team = _tracking(_render(tmp_path, ARGS, config=config, MLFLOW_TRACKING_URI="http://127.0.0.1:5001"))
    assert team is not None and team["mlflow"] == {"tracking_uri": "http://127.0.0.1:5002", "experiment": "team"}
    assert team["source"].endswith("pyproject.toml [tool.rtjob]") and team["params"] == {"lr": "0.1", "layers": "[2, 3]"}
    own = _tracking(_render(tmp_path, "tracking:\n  wandb:\n    project: p\n", config=config))
    assert own is not None and own["wandb"] == {"project": "p"} and "mlflow" not in own  # the job's, whole
    proc = _render(tmp_path, ARGS, config=f'[tool.rtjob.tracking]\nmlflow = {{tracking_uri = '
                                         f'"http://u:{PASSWORD}@127.0.0.1:5000"}}\n')
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "pyproject.toml" in proc.stderr and "carries a password" in proc.stderr and PASSWORD not in proc.stderr
    # the current context's table applies where the project config has none
    (tmp_path / "xdg" / "rtjob").mkdir(parents=True)
    (tmp_path / "xdg" / "rtjob" / "config.toml").write_text(
        'current = "c"\n[contexts.c]\ntracking = {wandb = {project = "from-context"}}\n')
    by_context = _tracking(_render(tmp_path, ARGS))
    assert by_context is not None and by_context["wandb"] == {"project": "from-context"}
    assert "context c" in by_context["source"], by_context["source"]


def test_wandb_names_a_project_and_bad_blocks_are_one_line_with_where_exit_2(tmp_path: Path) -> None:
    both = _tracking(_render(tmp_path, TRACKING + "  wandb:\n    project: team-p\n    entity: lab\n"))
    assert both is not None and both["wandb"] == {"project": "team-p", "entity": "lab"}
    assert both["mlflow"]["experiment"] == "team-x"
    wandb_only = _tracking(_render(tmp_path, "tracking:\n  wandb:\n    project: p\n"))
    assert wandb_only is not None and wandb_only["wandb"] == {"project": "p"} and "mlflow" not in wandb_only
    for body, says in [("tracking:\n  wandb:\n    project: a/b\n", "project"),
                       ("tracking: {}\n", "names no tracker"),
                       (f"tracking:\n  mlflow:\n    tracking_uri: http://u:{PASSWORD}@127.0.0.1:5000\n",
                        "carries a password")]:
        proc = _render(tmp_path, body)
        assert proc.returncode == 2 and proc.stdout == "" and says in proc.stderr, proc.stderr
        assert re.search(r"jobs/t\.yaml:\d+: tracking", proc.stderr) and len(proc.stderr.splitlines()) == 1
        assert PASSWORD not in proc.stderr


def test_a_trackers_token_in_env_vars_is_refused_a_secrets_entry_carries_it(tmp_path: Path) -> None:
    for body, flags, name in [(TRACKING + f"env_vars:\n  MLFLOW_TRACKING_TOKEN: {PASSWORD}\n", (), "MLFLOW_TRACKING_TOKEN"),
                              ("tracking:\n  wandb:\n    project: p\n", ("--env", f"WANDB_API_KEY={PASSWORD}"),
                               "WANDB_API_KEY")]:
        proc = _render(tmp_path, body, *flags)
        assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert f"t.yaml: env_vars sets {name}," in proc.stderr and "give it as a secrets: entry" in proc.stderr
        assert PASSWORD not in proc.stderr
    # The same names as references go, as do they in a job that mirrors to no tracker (the script's own use).
    assert _tracking(_render(tmp_path, TRACKING + "secrets:\n  MLFLOW_TRACKING_TOKEN: env:MY_TOKEN\n",
                             MY_TOKEN=PASSWORD)) is not None
    assert _tracking(_render(tmp_path, "", "--env", f"WANDB_API_KEY={PASSWORD}")) is None


def test_the_tags_name_the_git_commit_and_render_explain_says_which_setting_applies(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "jobs").mkdir()
    (project / "jobs" / "t.yaml").write_text("name: t\nentrypoint: python -c pass\n" + TRACKING)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com",
                               *args], check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    tracking = _tracking(_render(tmp_path, TRACKING))
    assert tracking is not None
    tags = tracking["tags"]
    assert tags["mlflow.source.git.commit"] == git("rev-parse", "HEAD") and tags["mlflow.source.git.branch"] == "main"
    assert tags["rtjob.git_dirty"] == "true"  # render wrote pyproject.toml after the commit: not committed
    assert tags["mlflow.source.type"] == "JOB" and tags["mlflow.source.name"].endswith("t.yaml")
    assert tags["mlflow.user"] == tags["rtjob.user"]

    explained = json.loads(_render(tmp_path, TRACKING + ARGS, "--explain").stdout)["explain"]["tracking"]
    assert explained["value"]["mlflow"] == {"tracking_uri": "http://127.0.0.1:5999", "experiment": "team-x"}
    assert explained["value"]["params"] == ["layers", "lr"] and explained["source"].endswith("t.yaml")
    text = _render(tmp_path, ARGS, "--explain", output="text", MLFLOW_TRACKING_URI="http://127.0.0.1:5001")
    line = next(line for line in text.stdout.splitlines() if line.strip().startswith("tracking"))
    assert "mlflow http://127.0.0.1:5001 (experiment rtjob)" in line and "from MLFLOW_TRACKING_URI" in line, line
    assert PASSWORD not in text.stdout
    assert not any(line.strip().startswith("tracking") for line in _render(
        tmp_path, ARGS, "--explain", output="text").stdout.splitlines())  # nothing asked: no line


def test_epoch_and_system_rows_become_mlflow_metrics() -> None:
    row = {"epoch": 3, "val_loss": 0.25, "epoch_time_s": 12, "precision": "bf16", "ok": True}
    assert epoch_step(row, 1) == 3 and epoch_step({"val_loss": 1.0}, 2) == 2  # no epoch: its place in the history
    assert epoch_metrics(row, 3, 1700000000.0) == [
        {"key": "val_loss", "value": 0.25, "timestamp": 1700000000000, "step": 3},
        {"key": "epoch_time_s", "value": 12.0, "timestamp": 1700000000000, "step": 3}]
    system = {"time": 1700000000.5, "node": "node 1:x", "cpu_percent": 50.0, "mem_used_mb": 1000.0,
              "mem_total_mb": 4000.0,
              "gpus": [{"index": 0, "util_percent": 90.0, "mem_used_mb": 100.0, "mem_total_mb": None}]}
    steps = SystemSteps()
    first = {m["key"]: (m["value"], m["step"]) for m in steps.metrics(system)}
    assert first == {"system/node 1_x/cpu_utilization_percentage": (50.0, 0),
                     "system/node 1_x/system_memory_usage_megabytes": (1048.6, 0),
                     "system/node 1_x/system_memory_usage_percentage": (25.0, 0),
                     "system/node 1_x/gpu_0_utilization_percentage": (90.0, 0),
                     "system/node 1_x/gpu_0_memory_usage_megabytes": (104.9, 0)}
    assert {m["step"] for m in steps.metrics(system)} == {1}  # the node's next row: its next step
    assert {m["step"] for m in steps.metrics({**system, "node": "b"})} == {0}  # another node counts its own
    assert steps.metrics({"node": "b"}) == []  # no time: not a system row


def test_step_rows_become_metrics_with_their_step_and_time() -> None:
    row = {"step": 7, "time": 1700000000.25, "loss": 0.5, "lr": 1, "trial": "t1", "flag": True}
    assert metrics_of(row) == [
        {"key": "t1/loss", "value": 0.5, "timestamp": 1700000000250, "step": 7},
        {"key": "t1/lr", "value": 1.0, "timestamp": 1700000000250, "step": 7}]
    assert metrics_of({"time": 1.0, "loss": 1.0}) == []  # no step: not a step row


def test_the_view_names_the_mlflow_run_and_what_was_not_sent() -> None:
    assert tracking_lines(None) == []
    sent = {"mlflow": {"url": "http://m/#/experiments/1/runs/abc", "run_id": "abc"}}
    assert tracking_lines(sent) == ["mlflow:      http://m/#/experiments/1/runs/abc"]
    unsent = {"mlflow": {"url": "http://m/r", "unsent": 12, "fault": "MLflow at http://m not reached",
                         "resend": "rtjob track resend r-1"}}
    assert tracking_lines(unsent)[1] == ("mlflow:      12 metric(s) not sent (MLflow at http://m not reached): "
                                         "`rtjob track resend r-1` sends them")


def test_status_and_show_name_the_mlflow_run(tmp_path: Path) -> None:
    """The record's `tracking` as `status` and `show` print it (a teammate reading the team's storage)."""
    import dataclasses

    from support.cli import base_env
    from support.ui_runs import write_run

    store = tmp_path / "store"
    record = dataclasses.replace(write_run(store, "r-m", "train"), tracking={"mlflow": {
        "url": "http://m/#/experiments/1/runs/abc", "run_id": "abc", "tracking_uri": "http://m", "sent": 3}})
    (Path(record.storage_uri or "") / "rtjob-run.json").write_text(record.dumps())
    env = {**base_env(tmp_path / "home"), "RTJOB_STORAGE": str(store)}
    for command in ("status", "show"):
        proc = run_in_process(command, "r-m", env=env)
        assert proc.returncode == 0, proc.stderr
        assert "mlflow:      http://m/#/experiments/1/runs/abc" in proc.stdout, (command, proc.stdout)
