"""`notify:` in a job file, the project config or a context: references only (a literal URL is one file:line
error), the most specific wins whole (render --explain says which), each referenced variable forwarded into the
job's env and masked whole in everything printed, RTJOB_NOTIFY beside it. Offline: rtjob's entry point in this
process, nothing is contacted."""

from __future__ import annotations

import json
import subprocess
import typing
from pathlib import Path

import pytest
from rtjob.core.redact import MASK, mask_mapping, secret_values
from rtjob.jobspec.schema import Notify
from support.cli import plant, run_in_process
from support.scrub import scrubbed_environ

import rtjob_contract as contract

NOWHERE = "http://127.0.0.1:9"  # never contacted by render
SLACK = plant("https://hooks.slack.com/services/T000/B000/SECRETXYZ123")  # not secret by name or shape
HOOK = plant("http://127.0.0.1:9/hooks/notify-7f3c9a1e")
JOB_NOTIFY = "notify:\n  on: [failed]\n  targets:\n    - type: slack\n      url: {env: SLACK_URL}\n"
PROJECT_NOTIFY = 'notify = {on = ["succeeded", "failed"], targets = [{type = "webhook", url = {env = "HOOK_URL"}}]}\n'
CONTEXT = ('current = "c"\n[contexts.c]\nstorage = "/tmp/rtjob-notify-test-runs"\n'
           'notify = {on = ["stopped"], targets = [{type = "apprise", url = {env = "APPRISE_URL"}}]}\n')


def _project(tmp_path: Path, *, project_notify: bool = True, context: str = CONTEXT) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "jobs" / "own.yaml").write_text(f"name: own\nentrypoint: python -c pass\n{JOB_NOTIFY}")
    (project / "jobs" / "plain.yaml").write_text("name: plain\nentrypoint: python -c pass\n")
    (project / "pyproject.toml").write_text("[tool.rtjob]\n" + (PROJECT_NOTIFY if project_notify else ""))
    xdg = tmp_path / "xdg"
    (xdg / "rtjob").mkdir(parents=True)
    (xdg / "rtjob" / "config.toml").write_text(context)
    env = scrubbed_environ()
    env.update(RTJOB_HOME=str(tmp_path / "rtjob-home"), HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(xdg),
               SLACK_URL=SLACK, HOOK_URL=HOOK, APPRISE_URL=HOOK)
    return project, env


def _render(project: Path, env: dict[str, str], job: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_in_process("render", job, "--backend", "ray", "--address", NOWHERE, "--submission-id", "n-1",
                          *extra, env=env, cwd=project)


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, typing.Any]:
    assert proc.returncode == 0, proc.stderr
    data: dict[str, typing.Any] = json.loads(proc.stdout)
    return data


def test_the_job_files_notify_wins_whole_and_is_forwarded_masked(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    proc = _render(project, env, "own", "--explain", "--output", "json")
    data = _json(proc)
    notify = {"on": ["failed"], "targets": [{"type": "slack", "env": "SLACK_URL"}], "steps": False}
    assert data["explain"]["notify"] == {"value": notify, "source": "jobs/own.yaml"}
    runtime_env = data["submit_job"]["runtime_env"]
    env_vars = runtime_env["env_vars"]
    # forwarded from the client in the sealed package (issue 45), never in env_vars: named, never shown
    assert "SLACK_URL" not in env_vars and "rtjob_sealed/ (sealed: SLACK_URL)" in runtime_env["py_modules"]
    assert "HOOK_URL" not in env_vars and "APPRISE_URL" not in env_vars  # nothing merged from the project
    assert json.loads(env_vars[contract.ENV_NOTIFY]) == notify
    assert "SECRETXYZ123" not in proc.stdout + proc.stderr and "/services/" not in proc.stdout


def test_the_project_config_beats_the_current_context(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    data = _json(_render(project, env, "plain", "--explain", "--output", "json"))
    assert data["explain"]["notify"] == {
        "value": {"on": ["succeeded", "failed"], "targets": [{"type": "webhook", "env": "HOOK_URL"}], "steps": False},
        "source": f"{project / 'pyproject.toml'} [tool.rtjob]"}
    assert "HOOK_URL" not in data["submit_job"]["runtime_env"]["env_vars"]
    assert "rtjob_sealed/ (sealed: HOOK_URL)" in data["submit_job"]["runtime_env"]["py_modules"]
    assert "APPRISE_URL" not in data["submit_job"]["runtime_env"]["env_vars"]


def test_the_current_context_applies_when_nothing_more_specific_does(tmp_path: Path) -> None:
    project, env = _project(tmp_path, project_notify=False)
    proc = _render(project, env, "plain", "--explain")
    assert proc.returncode == 0, proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("notify ")]
    assert "on stopped: apprise (APPRISE_URL)" in line and "from current context c (" in line
    assert "rtjob_sealed/ (sealed: APPRISE_URL)" in proc.stdout and HOOK not in proc.stdout


def test_no_notify_anywhere_adds_nothing(tmp_path: Path) -> None:
    project, env = _project(tmp_path, project_notify=False, context="")
    data = _json(_render(project, env, "plain", "--explain", "--output", "json"))
    assert "notify" not in data["explain"] and contract.ENV_NOTIFY not in data["submit_job"]["runtime_env"]["env_vars"]


def test_a_literal_url_in_a_job_file_is_one_line_with_its_place(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    (project / "jobs" / "lit.yaml").write_text(f"name: lit\nentrypoint: python -c pass\nnotify:\n  on: [failed]\n"
                                               f"  targets:\n    - type: slack\n      url: {SLACK}\n")
    proc = _render(project, env, "lit")
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("rtjob: error: jobs/lit.yaml:7: notify.targets[0].url: value error, a literal URL is refused"), line
    assert "url: {env: VAR}" in line and "SECRETXYZ123" not in line


def test_a_literal_url_in_a_context_is_one_line_naming_the_file(tmp_path: Path) -> None:
    context = ('current = "c"\n[contexts.c]\n'
               f'notify = {{on = ["failed"], targets = [{{type = "slack", url = "{SLACK}"}}]}}\n')
    project, env = _project(tmp_path, project_notify=False, context=context)
    proc = _render(project, env, "plain")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "config.toml: [contexts.c]: notify: targets[0].url: value error, a literal URL is refused" in line, line
    assert 'url = {env = "VAR"}' in line and "SECRETXYZ123" not in line


def test_an_unknown_outcome_in_the_project_config_is_refused(tmp_path: Path) -> None:
    project, env = _project(tmp_path, project_notify=False)
    (project / "pyproject.toml").write_text(
        '[tool.rtjob]\nnotify = {on = ["done"], targets = [{type = "slack", url = {env = "SLACK_URL"}}]}\n')
    proc = _render(project, env, "plain")
    assert proc.returncode == 2
    assert "[tool.rtjob]: notify: on[0]: not a valid value; expected one of 'succeeded', 'failed', 'stopped' or " \
           "'retrying'" in proc.stderr


def test_a_variable_missing_on_the_client_is_bad_input_naming_it_and_the_job_file(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    del env["SLACK_URL"]
    proc = _render(project, env, "own")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rtjob: error: jobs/own.yaml: environment variable SLACK_URL is not set (the notify slack "
                                   "target references it; rtjob forwards it to the run as a secret)")
    del env["HOOK_URL"]
    proc = _render(project, env, "plain")
    assert proc.returncode == 2 and "environment variable HOOK_URL is not set" in proc.stderr
    assert f"(notify from {project / 'pyproject.toml'} [tool.rtjob])" in proc.stderr
    # validate checks the files: an unset variable is one warning line per job, exit 0 (render refuses it, above).
    checked = run_in_process("validate", "own", "plain", env=env, cwd=project)
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stderr.splitlines() if line.startswith("warning")]
    assert len(warnings) == 2 and "SLACK_URL is not set" in warnings[0] and "HOOK_URL is not set" in warnings[1]
    assert all("render and submit refuse it here" in line for line in warnings), warnings
    env.update(SLACK_URL=SLACK, HOOK_URL=HOOK)
    assert "is not set" not in run_in_process("validate", "own", "plain", env=env, cwd=project).stderr


def test_the_job_may_not_set_a_forwarded_variable_itself(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    proc = _render(project, env, "own", "--env", "SLACK_URL=https://example.invalid/x")
    assert proc.returncode == 2 and "env_vars sets SLACK_URL, which a notify slack target references" in proc.stderr


def test_the_redactor_masks_every_variable_rtjob_notify_names() -> None:
    env = {"SLACK_URL": SLACK, "OTHER": "plain", contract.ENV_NOTIFY: json.dumps(
        {"on": ["failed"], "targets": [{"type": "slack", "env": "SLACK_URL"}], "steps": False})}
    assert mask_mapping(env)["SLACK_URL"] == MASK and mask_mapping(env)["OTHER"] == "plain"
    assert SLACK in secret_values(env)  # a run read back from the cluster: its secrets include the URL
    assert mask_mapping({"SLACK_URL": SLACK}) == {"SLACK_URL": SLACK}  # without RTJOB_NOTIFY: an ordinary variable
    assert mask_mapping({"SLACK_URL": SLACK, contract.ENV_NOTIFY: "not json"})["SLACK_URL"] == SLACK


def test_the_schemas_outcomes_and_types_are_the_contracts() -> None:
    on = Notify.model_fields["on"].annotation
    target = typing.get_args(Notify.model_fields["targets"].annotation)[0]
    assert typing.get_args(typing.get_args(on)[0]) == contract.NOTIFY_OUTCOMES
    assert typing.get_args(target.model_fields["type"].annotation) == contract.NOTIFY_TARGET_TYPES


@pytest.mark.parametrize("bad", ["notify: {on: [], targets: [{type: slack, url: {env: X}}]}",
                                 "notify: {on: [failed], targets: [{type: slack, url: {file: x}}]}",
                                 "notify: {on: [failed], targets: [{type: slack, url: {env: 1X}}]}"])
def test_empty_outcomes_and_other_references_are_refused(tmp_path: Path, bad: str) -> None:
    project, env = _project(tmp_path)
    (project / "jobs" / "bad.yaml").write_text(f"name: bad\nentrypoint: python -c pass\n{bad}\n")
    proc = _render(project, env, "bad")
    [line] = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("rtjob: error: jobs/bad.yaml:3: ") and "notify." in line, line


def test_the_run_record_keeps_the_reference_never_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What rtjob records at submit (the ledger row and rtjob-run.json): the job's `notify:` as written, the
    request as rendered; the forwarded URL in neither."""
    from rtjob.core.model import RunInfo, RunStatus
    from rtjob.jobspec.project import load_settings
    from rtjob.jobspec.resolve import Overrides
    from rtjob.runs.records import new_record
    from rtjob.runs.runner import plan

    project, env = _project(tmp_path)
    for name in ("RTJOB_HOME", "HOME", "XDG_CONFIG_HOME", "SLACK_URL", "HOOK_URL", "APPRISE_URL"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.chdir(project)
    settings = load_settings({"backend": "ray", "address": NOWHERE}, root=project)
    planned = plan("own", settings, Overrides(submission_id="n-2"))
    assert planned.job.notify is not None and planned.job.sealed_env["SLACK_URL"] == SLACK  # sent sealed, as it is
    assert "SLACK_URL" not in planned.request.runtime_env["env_vars"] and "SLACK_URL" not in planned.job.env_vars
    assert SLACK in planned.request.secrets()
    record = new_record(planned, RunInfo(id="n-2", job="own", backend="ray", status=RunStatus.PENDING))
    text = record.dumps()
    assert "SECRETXYZ123" not in text and "/services/" not in text
    assert record.spec["document"]["notify"]["targets"] == [{"type": "slack", "url": {"env": "SLACK_URL"}}]


GH_TOKEN = plant("ghp_" + "N0tifySpecT0ken" * 3)


def test_a_github_target_forwards_its_token_masked_and_names_its_repository(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    (project / "jobs" / "gh.yaml").write_text(
        "name: gh\nentrypoint: python -c pass\nnotify:\n  on: [succeeded, failed]\n  targets:\n"
        "    - type: github\n      repo: acme/train\n      token: {env: GITHUB_DISPATCH_TOKEN}\n")
    env["GITHUB_DISPATCH_TOKEN"] = GH_TOKEN
    proc = _render(project, env, "gh", "--output", "json")
    data = _json(proc)
    job_env = data["submit_job"]["runtime_env"]["env_vars"]
    assert json.loads(job_env[contract.ENV_NOTIFY])["targets"] == [
        {"type": "github", "env": "GITHUB_DISPATCH_TOKEN", "repo": "acme/train", "api_url": contract.GITHUB_API_URL}]
    assert "GITHUB_DISPATCH_TOKEN" not in job_env and GH_TOKEN not in proc.stdout + proc.stderr
    assert "rtjob_sealed/ (sealed: GITHUB_DISPATCH_TOKEN)" in data["submit_job"]["runtime_env"]["py_modules"]


@pytest.mark.parametrize(("target", "expect"), [
    ("    - type: github\n      repo: acme/train\n      url: {env: HOOK_URL}\n", "a github target takes repo"),
    ("    - type: github\n      token: {env: HOOK_URL}\n", "a github target takes repo"),
    ("    - type: github\n      repo: acme/train\n      token: ghp_literal\n", "a literal token is refused"),
    ("    - type: webhook\n      url: {env: HOOK_URL}\n      repo: acme/train\n", "a webhook target takes url"),
])
def test_a_github_target_takes_its_own_fields_only(tmp_path: Path, target: str, expect: str) -> None:
    project, env = _project(tmp_path)
    (project / "jobs" / "gh.yaml").write_text(
        f"name: gh\nentrypoint: python -c pass\nnotify:\n  on: [failed]\n  targets:\n{target}")
    proc = _render(project, env, "gh")
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("rtjob: error: jobs/gh.yaml:") and expect in line and "ghp_literal" not in line, line
