"""The `secrets` setting (issue 45): a context's (or the project config's) NAME = "REFERENCE" entries reach every job
run there as its own `secrets:` do, rendered as references (never values); a job's own entry of the name wins; a bad
entry is one line with its file:line (exit 2); a job that sets the name in env_vars, or runs without the companion,
is refused in one line; so are forwarded AWS credentials or notify URLs with no companion to unseal them. Offline: `render` in this process, no secret resolved (that happens on the cluster:
tests/e2e/test_run_side.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rtjob.core import secret_refs
from support.project import ProjectCli, write_files

RENDER = ("render", "t", "--backend", "ray", "--address", "http://127.0.0.1:9", "--submission-id", "t-1", "-o", "json")


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> ProjectCli:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # the contexts file of this test alone
    return ProjectCli(tmp_path, monkeypatch, capsys)


def _job(cli: ProjectCli, body: str = "", config: str = "", context: str | None = None) -> None:
    write_files(cli.project, {"jobs/t.yaml": f"name: t\nentrypoint: python -c pass\n{body}",
                              "pyproject.toml": f"[tool.rtjob]\n{config}"})
    if context is not None:
        write_files(cli.home.parent / "xdg" / "rtjob", {"config.toml": f'current = "team"\n[contexts.team]\n{context}'})


def _references(cli: ProjectCli, **env: str) -> dict[str, str]:
    proc = cli(*RENDER, env=env)
    assert proc.returncode == 0, proc.stderr
    assert not any(value in proc.stdout for value in env.values())  # an env: value travels sealed, never rendered
    env = json.loads(proc.stdout)["submit_job"]["runtime_env"]["env_vars"]
    return dict(json.loads(env.get(secret_refs.ENV_SECRETS) or "{}"))


def test_a_contexts_secrets_reach_the_job_as_references_and_the_jobs_own_win(cli: ProjectCli) -> None:
    _job(cli, "secrets:\n  HF_TOKEN: ssm://mine/hf\n",
         context='secrets = {HF_TOKEN = "aws-sm://team/hf#token", WANDB_API_KEY = "env:TEAM_WANDB"}\n')
    assert _references(cli, TEAM_WANDB="wandb-value-91c2") == {"HF_TOKEN": "ssm://mine/hf",
                                                                "WANDB_API_KEY": "env:TEAM_WANDB"}
    _job(cli, config='secrets = {DB_PASSWORD = "file:///run/secrets/db"}\n')  # the project config's, no context
    assert _references(cli) == {"DB_PASSWORD": "file:///run/secrets/db"}


@pytest.mark.parametrize(("context", "says"), [
    ('secrets = {HF_TOKEN = "hunter2"}\n', "secrets.HF_TOKEN: not a secret reference"),
    ('secrets = {"bad-name" = "ssm://x"}\n', "is not a valid environment variable name"),
    ('secrets = "ssm://x"\n', "secrets must be a table"),
])
def test_a_bad_entry_is_one_line_with_its_file_and_line(cli: ProjectCli, context: str, says: str) -> None:
    _job(cli, context=context)
    proc = cli(*RENDER)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert says in proc.stderr and "config.toml:3" in proc.stderr, proc.stderr
    assert "hunter2" not in proc.stderr


@pytest.mark.parametrize(("body", "says"), [
    ("env_vars:\n  HF_TOKEN: plain\n", "env_vars sets HF_TOKEN, which the secrets setting"),
    ("companion: false\n", "companion: false, but the secrets setting"),
])
def test_a_job_that_cannot_take_them_is_refused_in_one_line(cli: ProjectCli, body: str, says: str) -> None:
    _job(cli, body, context='secrets = {HF_TOKEN = "ssm://team/hf"}\n')
    proc = cli(*RENDER)
    assert proc.returncode == 2 and says in proc.stderr and "context team" in proc.stderr, proc.stderr


KEY = "AKIAFORWARDED0000000"
SLACK = "https://hooks.slack.com/services/T000/B000/NOCOMPANION42"
NOTIFY = "notify:\n  on: [failed]\n  targets:\n    - type: slack\n      url: {env: SLACK_URL}\n"


@pytest.mark.parametrize(("body", "extra", "env", "says"), [
    ("companion: false\n", ("--storage", "s3://b/runs", "--forward-aws-credentials"), {},
     "t.yaml: companion: false leaves nothing on the cluster to unseal the forwarded AWS credentials,"),
    (NOTIFY, (), {"RTJOB_COMPANION": "0"}, "t.yaml: RTJOB_COMPANION=0 leaves nothing on the cluster to unseal the "
                                          "notify URLs,"),
])
def test_client_held_secrets_with_no_companion_are_refused_never_sent_as_env_vars(
        cli: ProjectCli, body: str, extra: tuple[str, ...], env: dict[str, str], says: str) -> None:
    _job(cli, body)
    proc = cli(*RENDER, *extra, env={"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": "forwarded-secret-77",
                                     "SLACK_URL": SLACK, **env})
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert says in proc.stderr and "Ray's job info" in proc.stderr, proc.stderr
    assert KEY not in proc.stderr and SLACK not in proc.stderr


def test_an_unset_env_reference_of_the_setting_is_blamed_on_the_setting_not_the_job(cli: ProjectCli) -> None:
    _job(cli, context='secrets = {WANDB_API_KEY = "env:TEAM_WANDB_NOT_SET"}\n')
    proc = cli(*RENDER)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "context team (" in proc.stderr and "config.toml): secrets.WANDB_API_KEY" in proc.stderr, proc.stderr
    assert "secrets.WANDB_API_KEY: environment variable TEAM_WANDB_NOT_SET is not set here" in proc.stderr
    assert "t.yaml" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(("body", "says", "line"), [
    ("secrets:\n  HF_TOKEN: hunter2\n", "secrets.HF_TOKEN: value error, not a secret reference", 4),
    ("companion: false\nsecrets:\n  HF_TOKEN: ssm://team/hf\n", "secrets: needs the companion", 4),
    ("env_vars:\n  HF_TOKEN: x\nsecrets:\n  HF_TOKEN: ssm://team/hf\n", "HF_TOKEN is also in env_vars", 5),
])
def test_a_jobs_own_bad_or_unusable_secrets_entry_is_one_line_at_its_file_and_line(
        cli: ProjectCli, body: str, says: str, line: int) -> None:
    """The job file's own `secrets:` as `validate` and `render` read it: a value that is no reference (it would be
    the secret itself), or secrets in a job with no companion to resolve them, is one line at jobs/t.yaml:LINE,
    exit 2, the value never echoed."""
    _job(cli, body)
    for command in (("validate", "t"), RENDER):
        proc = cli(*command)
        assert proc.returncode == 2 and proc.stdout == "", (command, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
        assert f"jobs/t.yaml:{line}" in proc.stderr and "hunter2" not in proc.stderr, proc.stderr
