"""Pipeline files (a job file with `steps:`): each step a complete job, ids and storage fixed at plan time, inputs
handed down by folder, bad input one line with file:line, and every step's request shown by render. No cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.companion import inner
from support.project import ProjectCli, write_files

import rtjob_contract as contract

PIPELINE = """\
name: flow
description: three steps
defaults:
  requirements: []
  env_vars: {SHARED: "1"}
  local:
    args: {quick: true}
steps:
  - name: prep
    entrypoint: python prep.py
    args: {size: 010}
  - name: train
    job: trainer
    nodes: 3
    args: {epochs: 1}
  - name: report
    entrypoint: python report.py
"""
TRAINER = """\
name: trainer
entrypoint: python -m train
requirements: []
nodes: 2
args: {epochs: 5, lr: 0.1}
tags: {team: ml}
"""


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ProjectCli:
    cli = ProjectCli(tmp_path, monkeypatch, capsys)
    write_files(cli.project, {"rtjob.toml": 'storage = "s3://bucket/runs"\n', "jobs/flow.yaml": PIPELINE,
                              "jobs/trainer.yaml": TRAINER, "prep.py": "", "report.py": ""})
    return cli


def _render(cli: ProjectCli, *args: str) -> dict:
    proc = cli("render", "flow", "-o", "json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_step_is_planned_with_its_id_storage_and_the_folders_of_the_steps_before_it(cli):
    data = _render(cli, "--submission-id", "p7", "--backend", "ray", "--address", "http://127.0.0.1:9")
    assert data["pipeline"]["id"] == "p7" and data["pipeline"]["storage_uri"] == "s3://bucket/runs/flow/p7"
    steps = data["steps"]
    assert [s["name"] for s in steps] == ["prep", "train", "report"]
    assert [s["run"]["id"] for s in steps] == ["p7-prep", "p7-train", "p7-report"]
    assert [s["run"]["job"] for s in steps] == ["flow-prep", "flow-train", "flow-report"]
    uris = [s["run"]["storage_uri"] for s in steps]
    assert uris == [f"s3://bucket/runs/flow-{n}/p7-{n}" for n in ("prep", "train", "report")]
    envs = [s["submit_job"]["runtime_env"]["env_vars"] for s in steps]
    assert contract.ENV_INPUT_URI not in envs[0] and contract.ENV_STEP_URIS not in envs[0]
    assert envs[1][contract.ENV_INPUT_URI] == uris[0] and envs[2][contract.ENV_INPUT_URI] == uris[1]
    assert json.loads(envs[2][contract.ENV_STEP_URIS]) == {"prep": uris[0], "train": uris[1]}
    assert all(e[contract.ENV_PIPELINE_ID] == "p7" and e["SHARED"] == "1" for e in envs)
    assert [e[contract.ENV_STEP_NAME] for e in envs] == ["prep", "train", "report"]
    # A job step: its own file's fields, the step's on top (args merged key by key); numbers kept as written.
    assert inner(steps[1]["submit_job"]["entrypoint"]) == "python -m train --epochs 1 --lr 0.1"
    assert inner(steps[0]["submit_job"]["entrypoint"]) == "python prep.py --size 010"
    assert steps[1]["run"]["nodes"] == 3


def test_nodes_flag_sizes_the_steps_that_set_none_and_set_targets_one_step(cli):
    data = _render(cli, "--nodes", "4", "--set", "report.args.title=x", "--backend", "ray",
                   "--address", "http://127.0.0.1:9")
    assert [s["run"]["nodes"] for s in data["steps"]] == [4, 3, 4]  # train pins nodes: 3
    assert inner(data["steps"][2]["submit_job"]["entrypoint"]) == "python report.py --title x"
    assert "--title" not in data["steps"][0]["submit_job"]["entrypoint"]
    bad = cli("render", "flow", "--set", "args.epochs=1")
    assert bad.returncode == 2 and "STEP.KEY.PATH=VALUE" in bad.stderr and "prep, train, report" in bad.stderr


def test_the_local_profile_of_defaults_reaches_every_step_on_the_embedded_cluster(cli):
    data = _render(cli)  # the default backend: the embedded cluster (its local: profile applies)
    assert all("--quick" in s["submit_job"]["entrypoint"] for s in data["steps"])


def test_text_render_names_each_step_and_anyscale_yaml_is_the_one_job_file_that_runs_them(cli):
    text = cli("render", "flow", "--submission-id", "p8")
    assert text.returncode == 0, text.stderr
    assert "pipeline:  flow  (jobs/flow.yaml)" in text.stdout and "prep -> train -> report" in text.stdout
    assert text.stdout.count("== step ") == 3 and "run id:    p8-train" in text.stdout
    files = cli("render", "flow", "--submission-id", "p8", "--backend", "anyscale", "-o", "yaml")
    assert files.returncode == 0, files.stderr
    docs = [d for d in yaml.safe_load_all(files.stdout) if d]
    assert [d["name"] for d in docs] == ["p8-supervisor"]  # one Anyscale job; its driver runs the steps
    assert docs[0]["entrypoint"] == "python -m rtjob.runside.supervisor p8 ray"
    steps = json.loads(docs[0]["env_vars"][contract.ENV_PIPELINE_STEPS])
    assert [s["submission_id"] for s in steps] == ["p8-prep", "p8-train", "p8-report"]
    assert steps[1]["runtime_env"]["env_vars"][contract.ENV_INPUT_URI] == "s3://bucket/runs/flow-prep/p8-prep"


@pytest.mark.parametrize(("text", "where", "what"), [
    ("name: f\nsteps: []\n", "jobs/f.yaml:2", "non-empty list"),
    ("name: f\nsteps:\n  - entrypoint: x\n", "jobs/f.yaml:3", "each step needs a name"),
    ("name: f\nsteps:\n  - name: a\n    entrypoint: x\n  - name: a\n    entrypoint: y\n", "jobs/f.yaml:5", "used twice"),
    ("name: f\nsteps:\n  - name: a\n    entrypoint: x\n    nodez: 2\n", "jobs/f.yaml:5", "did you mean 'nodes'"),
    ("name: f\ndefaults:\n  timeout_s: -1\nsteps:\n  - name: a\n    entrypoint: x\n", "jobs/f.yaml:3",
     "step a: timeout_s"),
    ("name: f\nsteps:\n  - name: a\n", "jobs/f.yaml:3", "needs job: NAME or an entrypoint"),
    ("name: f\nsteps:\n  - name: a\n    job: nope\n", "jobs/f.yaml:4", "unknown job 'nope'"),
    ("name: f\nentrypoint: x\nsteps:\n  - name: a\n    entrypoint: x\n", "jobs/f.yaml:2", "unknown key 'entrypoint'"),
])
def test_bad_pipelines_are_one_line_with_file_and_line(cli, text, where, what):
    write_files(cli.project, {"jobs/f.yaml": text})
    proc = cli("render", "f")
    assert proc.returncode == 2, proc.stdout
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert where in line and what in line, line


def test_jobs_and_validate_know_pipelines_and_single_job_commands_refuse_one(cli):
    rows = {r["name"]: r for r in json.loads(cli("jobs", "-o", "json").stdout)}
    assert rows["flow"]["strategy"] == "pipeline" and rows["flow"]["steps"] == ["prep", "train", "report"]
    checked = json.loads(cli("validate", "-o", "json").stdout)
    assert {c["ref"]: c["kind"] for c in checked if c["kind"] != "compute_config"} == {"flow": "pipeline",
                                                                                     "trainer": "job"}
    assert all(c["ok"] for c in checked)
    # An Anyscale schedule runs a pipeline as one job whose driver runs its steps (tests/unit/test_schedule.py); a
    # GitHub workflow leaves it to the cluster's supervisor, or follows it (tests/unit/test_workflows.py).
    scheduled = cli("schedule", "render", "flow", "--cron", "0 3 * * *")
    assert scheduled.returncode == 0 and "rtjob.runside.supervisor" in scheduled.stdout, scheduled.stderr
    assert cli("schedule", "render", "flow", "--cron", "0 3 * * *", "--github").returncode == 0
    assert cli("render", "trainer", "--from", "a", "b").returncode == 2


def test_from_reuses_the_steps_before_it_only_when_they_succeeded(cli):
    from rtjob.core.record import RunRecord
    from rtjob.ledger import Ledger, ledger_path

    with Ledger(ledger_path()) as book:
        book.save(RunRecord(id="p1", job="flow", backend="local", status="FAILED", steps=[
            {"name": "prep", "run_id": "p1-prep", "storage_uri": "/s/flow-prep/p1-prep"},
            {"name": "train", "run_id": "p1-train", "storage_uri": "/s/flow-train/p1-train"},
            {"name": "report", "run_id": "p1-report", "storage_uri": "/s/flow-report/p1-report"}]))
        book.save(RunRecord(id="p1-prep", job="flow-prep", backend="local", status="SUCCEEDED",
                            storage_uri="/s/flow-prep/p1-prep"))
        book.save(RunRecord(id="p1-train", job="flow-train", backend="local", status="SUCCEEDED",
                            storage_uri="/s/flow-train/p1-train"))
        book.save(RunRecord(id="p1-report", job="flow-report", backend="local", status="FAILED"))
    data = _render(cli, "--from", "report", "p1", "--submission-id", "p2")
    assert [(s["name"], s["reused_from"]) for s in data["steps"]] == [("prep", "p1"), ("train", "p1"),
                                                                        ("report", None)]
    assert data["steps"][0]["run_id"] == "p1-prep" and data["steps"][2]["run"]["id"] == "p2-report"
    env = data["steps"][2]["submit_job"]["runtime_env"]["env_vars"]
    assert env[contract.ENV_INPUT_URI] == "/s/flow-train/p1-train"
    assert json.loads(env[contract.ENV_STEP_URIS]) == {"prep": "/s/flow-prep/p1-prep", "train": "/s/flow-train/p1-train"}
    after_failure = cli("render", "flow", "--from", "report", "p1", "--submission-id", "p1")
    assert after_failure.returncode == 2 and "another id" in after_failure.stderr
    # Not in the ledger: looked for in the project's storage too (here a folder, so no S3 credentials are needed).
    not_yet = cli("render", "flow", "--from", "report", "nope", "--storage", str(cli.project / "store"))
    assert not_yet.returncode == 2 and "no pipeline run nope" in not_yet.stderr
    with Ledger(ledger_path()) as book:
        book.save(RunRecord(id="p1-train", job="flow-train", backend="local", status="FAILED"))
    failed_before = cli("render", "flow", "--from", "report", "p1")
    assert failed_before.returncode == 2 and "--from train p1" in failed_before.stderr
    unknown_step = cli("render", "flow", "--from", "deploy", "p1")
    assert unknown_step.returncode == 2 and "has no such step" in unknown_step.stderr
