"""Contexts (jobspec/contexts.py, `rtjob context ...`, --context, RTJOB_CONTEXT): the precedence table, secrets only
as references (resolved, masked), list/use/add/remove through the real CLI entry point, a broken config file,
and the locked atomic write. Offline: the CLI runs in this process (rtjob.commands.main), nothing is contacted."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from rtjob.core.redact import REDACTOR
from rtjob.jobspec import contexts
from rtjob.jobspec.project import load_settings
from support.cli import in_process, plant
from support.scrub import scrub

CONFIG = """\
# my clusters (this comment survives rtjob's edits)
current = "dev"

[contexts.dev]
address = "http://dev-head:8265"
storage = "/mnt/dev-runs"

[contexts.prod]
address = "https://ray-prod:8265"  # the prod head
storage = "s3://prod-bucket/runs"
"""


@dataclass
class User:
    home: Path
    project: Path
    config: Path
    monkeypatch: pytest.MonkeyPatch

    def write(self, text: str) -> None:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(text, encoding="utf-8")

    def project_config(self, text: str) -> None:
        (self.project / "pyproject.toml").write_text(f"[tool.rtjob]\n{text}", encoding="utf-8")


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[User]:
    """A private HOME, XDG config folder and project (jobs/hello.yaml), no rtjob/Ray settings in the environment."""
    scrub(monkeypatch)
    home, project, xdg = tmp_path / "home", tmp_path / "project", tmp_path / "xdg"
    (project / "jobs").mkdir(parents=True)
    (project / "jobs" / "hello.yaml").write_text("name: hello\nentrypoint: python -c pass\n", encoding="utf-8")
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "rtjob-home"))
    monkeypatch.chdir(project)
    REDACTOR.clear()
    yield User(home, project, xdg / "rtjob" / "config.toml", monkeypatch)
    REDACTOR.clear()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """The console script's own entry point, in this process; the redactor starts empty as in a new process."""
    return in_process(capsys, *args)


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rtjob: error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


# --- precedence -------------------------------------------------------------------------------------------------

# Layers a row switches on; each sets `address` (the current context dev, and prod, set it in CONFIG).
#   project: [tool.rtjob] address; env: RAY_ADDRESS (a stray one, as on a head node); ctx_env: RTJOB_CONTEXT=prod;
#   ctx_flag: --context prod (RTJOB_CONTEXT, when also on, names dev); flag: --address.
PRECEDENCE = [
    ((), "http://dev-head:8265", "current context dev ("),
    (("project",), "http://project:8265", "[tool.rtjob]"),
    (("project", "env"), "http://stray-head:8265", "env RAY_ADDRESS"),
    (("project", "env", "ctx_env"), "https://ray-prod:8265", "context prod via RTJOB_CONTEXT ("),
    (("env", "ctx_flag"), "https://ray-prod:8265", "context prod via --context ("),  # the stray RAY_ADDRESS case
    (("project", "env", "ctx_env", "ctx_flag"), "https://ray-prod:8265", "context prod via --context ("),
    (("project", "env", "ctx_flag", "flag"), "http://flag:8265", "flag --address"),
    (("no_current",), None, "unset"),
]


@pytest.mark.parametrize("layers,address,source", PRECEDENCE, ids=["+".join(r[0]) or "current" for r in PRECEDENCE])
def test_precedence_flags_then_chosen_context_then_env_then_project_then_current(
        user: User, layers: tuple[str, ...], address: str | None, source: str) -> None:
    user.write(CONFIG.replace('current = "dev"\n', "") if "no_current" in layers else CONFIG)
    if "project" in layers:
        user.project_config('address = "http://project:8265"\n')
    if "env" in layers:
        user.monkeypatch.setenv("RAY_ADDRESS", "http://stray-head:8265")
    if "ctx_env" in layers:
        user.monkeypatch.setenv("RTJOB_CONTEXT", "prod")
    elif "ctx_flag" in layers:
        user.monkeypatch.setenv("RTJOB_CONTEXT", "dev")  # --context beats it
    flags = {"address": "http://flag:8265"} if "flag" in layers else {}
    settings = load_settings(flags, user.project, "prod" if "ctx_flag" in layers else None)
    assert settings.get("address") == address
    assert source in settings.source("address")
    if "context" in source:
        assert str(user.config) in settings.source("address")


def test_a_chosen_context_replaces_the_current_one_whole(user: User) -> None:
    """Only one context applies: a key prod does not set is not taken from the current context (dev)."""
    user.write(CONFIG.replace('storage = "s3://prod-bucket/runs"\n', ""))
    settings = load_settings({}, user.project, "prod")
    assert settings.get("storage") is None
    assert load_settings({}, user.project).get("storage") == "/mnt/dev-runs"


def test_render_explain_shows_the_context_and_the_default_config_path(user: User, capsys) -> None:
    """No XDG_CONFIG_HOME: ~/.config/rtjob/config.toml; --explain names the context and the file; a stray
    RAY_ADDRESS loses to --context, end to end."""
    user.monkeypatch.delenv("XDG_CONFIG_HOME")
    user.config = user.home / ".config" / "rtjob" / "config.toml"
    user.write(CONFIG)
    user.monkeypatch.setenv("RAY_ADDRESS", "http://stray-head:8265")
    proc = cli(capsys, "render", "hello", "--context", "prod", "--explain", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["address"] == "https://ray-prod:8265"
    where = "context prod via --context (~/.config/rtjob/config.toml)"
    assert data["explain"]["address"] == {"value": "https://ray-prod:8265", "source": where}
    assert data["explain"]["storage"]["source"] == where
    assert data["explain"]["backend"]["value"] == "ray"
    text = cli(capsys, "render", "hello", "--explain").stdout  # the current context (dev) loses to the env
    assert "http://stray-head:8265" in text and "from env RAY_ADDRESS" in text


def test_an_address_from_the_environment_with_the_current_contexts_storage_is_warned(user: User, capsys) -> None:
    """The one case where a context half-applies: a stray RAY_ADDRESS beats the current context's address while
    its storage still applies. One warning line on stderr; a whole context (--context) or none at all: no warning."""
    user.write(CONFIG)
    user.monkeypatch.setenv("RAY_ADDRESS", "http://stray-head:8265")
    proc = cli(capsys, "render", "hello", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if line.startswith("rtjob: warning: ")]
    assert len(warned) == 1, proc.stderr
    assert "env RAY_ADDRESS" in warned[0] and "current context dev" in warned[0] and "--context" in warned[0]
    json.loads(proc.stdout)  # stdout stays the document
    assert "warning" not in cli(capsys, "render", "hello", "--context", "prod").stderr
    user.monkeypatch.delenv("RAY_ADDRESS")
    assert "warning" not in cli(capsys, "render", "hello").stderr
    settings = load_settings({}, user.project)
    assert settings.half_applied_context() is None
    user.monkeypatch.setenv("RTJOB_STORAGE", "/mnt/mine")  # both from the environment: nothing half-applies
    user.monkeypatch.setenv("RAY_ADDRESS", "http://stray-head:8265")
    assert load_settings({}, user.project).half_applied_context() is None


@pytest.mark.parametrize("how", ["--context", "RTJOB_CONTEXT"])
def test_an_unknown_chosen_context_is_one_line_exit_2(user: User, capsys, how: str) -> None:
    user.write(CONFIG)
    args = ["render", "hello", "--context", "prdo"] if how == "--context" else ["render", "hello"]
    if how == "RTJOB_CONTEXT":
        user.monkeypatch.setenv("RTJOB_CONTEXT", "prdo")
    line = one_error(cli(capsys, *args))
    assert f"{how}: no context 'prdo'; did you mean 'prod'?" in line and "dev, prod" in line


def test_every_command_with_backend_options_takes_context() -> None:
    from rtjob.commands import cli as root

    def walk(group: click.Group) -> Iterator[click.Command]:
        for name, command in group.commands.items():
            if name == "context":  # `context add --address` stores an address, it does not use one
                continue
            yield from walk(command) if isinstance(command, click.Group) else [command]

    with_address = [c for c in walk(root) if any(p.name == "address" for p in c.params)]
    assert len(with_address) >= 8
    missing = [c.name for c in with_address if not any("--context" in p.opts for p in c.params)]
    assert not missing


# --- secrets: references, resolved and masked ---------------------------------------------------------------------

TOKEN = plant("Bearer prod-tok-5f4e3d2c1b0a")
FILE_SECRET = plant("filesecret-0a1b2c3d4e5f")


def test_references_are_resolved_when_used_and_never_printed(user: User, capsys) -> None:
    user.write(CONFIG + 'headers = { Authorization = { env = "PROD_RAY_TOKEN" }, X-Api-Key = { file = "key.txt" },'
                        ' X-Team = "ml" }\n')
    (user.config.parent / "key.txt").write_text(FILE_SECRET + "\n", encoding="utf-8")  # relative to the config
    user.monkeypatch.setenv("PROD_RAY_TOKEN", TOKEN)
    settings = load_settings({}, user.project, "prod")
    assert settings.get("headers") == {"Authorization": TOKEN, "X-Api-Key": FILE_SECRET, "X-Team": "ml"}
    assert TOKEN not in REDACTOR.text(f"echo {TOKEN}") and FILE_SECRET not in REDACTOR.text(f"k={FILE_SECRET}")
    for args in (("render", "hello", "--context", "prod", "--explain"),
                 ("render", "hello", "--context", "prod", "--explain", "-o", "json"),
                 ("context", "show", "prod"), ("context", "list", "-o", "json")):
        proc = cli(capsys, *args)
        assert proc.returncode == 0, proc.stderr
        assert TOKEN not in proc.stdout + proc.stderr and FILE_SECRET not in proc.stdout + proc.stderr
    shown = cli(capsys, "context", "show", "prod").stdout
    assert "Authorization: env:PROD_RAY_TOKEN" in shown and "X-Api-Key: file:key.txt" in shown
    request = json.loads(cli(capsys, "render", "hello", "--context", "prod", "-o", "json").stdout)
    assert request["headers"]["X-Team"] == "ml" and request["headers"]["Authorization"] != TOKEN


@pytest.mark.parametrize("ref,expect", [
    ('{ env = "NOT_SET_ANYWHERE" }', "environment variable NOT_SET_ANYWHERE is not set"),
    ('{ file = "missing.txt" }', "missing.txt"),
])
def test_an_unresolvable_reference_is_one_line_exit_2(user: User, capsys, ref: str, expect: str) -> None:
    user.write(CONFIG + f"headers = {{ Authorization = {ref} }}\n")
    line = one_error(cli(capsys, "render", "hello", "--context", "prod"))
    assert expect in line and "context prod" in line


def test_context_add_refuses_a_literal_secret_and_stores_references(user: User, capsys) -> None:
    secret = plant("sk-live-8a7b6c5d4e3f2a1b")
    line = one_error(cli(capsys, "context", "add", "prod", "--address", "https://ray-prod:8265",
                         "--header", f"X-Token: {secret}"))
    assert "--header-env 'X-Token=VAR'" in line and secret not in line
    assert not user.config.exists()
    line = one_error(cli(capsys, "context", "add", "prod", "--address", f"https://alice:{secret}@ray-prod:8265"))
    assert "--address-env" in line and secret not in line
    key = user.home / "key.txt"
    key.write_text(secret, encoding="utf-8")
    proc = cli(capsys, "context", "add", "prod", "--address", "https://ray-prod:8265", "--header", "X-Team: ml",
               "--header-env", "Authorization=PROD_RAY_TOKEN", "--header-file", f"X-Api-Key={key}")
    assert proc.returncode == 0, proc.stderr
    stored = user.config.read_text(encoding="utf-8")
    assert secret not in stored
    assert 'Authorization = {env = "PROD_RAY_TOKEN"}' in stored and f'X-Api-Key = {{file = "{key}"}}' in stored
    user.monkeypatch.setenv("PROD_RAY_TOKEN", TOKEN)
    assert load_settings({}, user.project, "prod").get("headers")["X-Api-Key"] == secret


# --- list / use / add / remove ----------------------------------------------------------------------------------


def _listed(capsys) -> dict:
    proc = cli(capsys, "context", "list", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_add_use_list_remove(user: User, capsys) -> None:
    assert _listed(capsys)["contexts"] == []
    assert "no contexts in" in cli(capsys, "context", "list").stderr
    assert cli(capsys, "context", "add", "dev", "--address", "http://dev-head:8265").returncode == 0
    assert cli(capsys, "context", "add", "any", "--backend", "anyscale", "--cloud", "c1", "--project", "p1",
               "--storage", "s3://b/runs", "--no-verify-tls", "--no-storage-check", "--use").returncode == 0
    listed = _listed(capsys)
    assert listed["current"] == "any" and listed["config"] == str(user.config)
    assert [(c["name"], c["current"]) for c in listed["contexts"]] == [("any", True), ("dev", False)]
    assert listed["contexts"][0] == {"name": "any", "current": True, "backend": "anyscale", "cloud": "c1",
                                          "project": "p1", "storage": "s3://b/runs", "verify_tls": False,
                                          "storage_check": False}
    table = cli(capsys, "context", "list").stdout.splitlines()
    assert [line.split() for line in table[1:]] == [["*", "any", "anyscale", "-", "s3://b/runs"],
                                                    ["dev", "-", "http://dev-head:8265", "-"]]

    assert cli(capsys, "context", "use", "dev").returncode == 0
    assert _listed(capsys)["current"] == "dev"
    assert "dev" in one_error(cli(capsys, "context", "add", "dev", "--address", "http://other:8265"))
    assert cli(capsys, "context", "add", "dev", "--address", "http://other:8265", "--replace").returncode == 0
    assert load_settings({}, user.project).get("address") == "http://other:8265"
    assert "did you mean 'dev'?" in one_error(cli(capsys, "context", "use", "dve"))

    proc = cli(capsys, "context", "remove", "dev")
    assert proc.returncode == 0 and "no context is current now" in proc.stderr
    assert _listed(capsys)["current"] is None
    assert "no current context" in one_error(cli(capsys, "context", "show"))
    assert "no context 'dev'" in one_error(cli(capsys, "context", "remove", "dev"))
    assert cli(capsys, "context", "use", "any").returncode == 0
    assert cli(capsys, "context", "use", "--none").returncode == 0 and _listed(capsys)["current"] is None
    assert "context name 'bad/name': use letters, digits" in one_error(cli(capsys, "context", "add", "bad/name"))


def test_edits_keep_the_users_comments(user: User, capsys) -> None:
    user.write(CONFIG)
    assert cli(capsys, "context", "use", "prod").returncode == 0
    assert cli(capsys, "context", "add", "stage", "--address", "http://stage:8265").returncode == 0
    assert cli(capsys, "context", "remove", "dev").returncode == 0
    text = user.config.read_text(encoding="utf-8")
    assert "# my clusters (this comment survives rtjob's edits)" in text and "# the prod head" in text
    assert 'current = "prod"' in text and "[contexts.dev]" not in text and "[contexts.stage]" in text


def test_anyscale_cloud_and_project_come_from_the_context_when_the_job_names_none(user: User, capsys) -> None:
    assert cli(capsys, "context", "add", "any", "--backend", "anyscale", "--cloud", "c1",
               "--project", "p1").returncode == 0
    config = json.loads(cli(capsys, "render", "hello", "--context", "any", "-o", "json").stdout)["job_config"]
    assert (config["cloud"], config["project"]) == ("c1", "p1")
    (user.project / "jobs" / "own.yaml").write_text("name: own\nentrypoint: python -c pass\ncloud: job-cloud\n",
                                                     encoding="utf-8")
    config = json.loads(cli(capsys, "render", "own", "--context", "any", "-o", "json").stdout)["job_config"]
    assert (config["cloud"], config["project"]) == ("job-cloud", "p1")


# --- a broken config file -----------------------------------------------------------------------------------------

BAD_CONFIGS = {
    "not-toml": ("[contexts.prod\naddress = 1", "not valid TOML"),
    "unknown-top-key": ('contxts = 1\n', "unknown key 'contxts'; valid: current"),
    "unknown-context-key": ('[contexts.prod]\nadress = "http://x:8265"\n', "unknown key 'adress'; did you mean 'address'?"),
    "literal-secret-header": (f'[contexts.prod]\nheaders = {{ Authorization = "{TOKEN}" }}\n',
                              "header 'Authorization' holds a secret in clear"),
    "address-password": (f'[contexts.prod]\naddress = "https://alice:{FILE_SECRET}@h:8265"\n',
                         "address holds a password in clear"),
    "verify-tls-type": ('[contexts.prod]\nverify_tls = "no"\n', "verify_tls must be true or false"),
    "current-undefined": ('current = "prod"\n', "current = 'prod' names no context"),
    "bad-reference": ('[contexts.prod]\nheaders = { A = { envv = "X" } }\n', "header 'A' must be a string"),
}


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=list(BAD_CONFIGS))
@pytest.mark.parametrize("args", [("render", "hello"), ("context", "list"), ("context", "add", "x")],
                         ids=["render", "list", "add"])
def test_a_broken_config_is_one_line_with_the_file_exit_2(user: User, capsys, case: str, args: tuple[str, ...]) -> None:
    text, expect = BAD_CONFIGS[case]
    user.write(text)
    line = one_error(cli(capsys, *args))
    assert str(user.config) in line and expect in line
    assert TOKEN not in line and FILE_SECRET not in line
    assert user.config.read_text(encoding="utf-8") == text  # never rewritten


# --- the write: private, atomic, locked ----------------------------------------------------------------------------


def test_the_config_is_private_and_replaced_atomically(user: User, monkeypatch: pytest.MonkeyPatch) -> None:
    contexts.add_context("dev", {"address": "http://dev:8265"})
    assert stat.S_IMODE(user.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(user.config.parent.stat().st_mode) == 0o700
    before = user.config.read_text(encoding="utf-8")

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(contexts.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        contexts.add_context("prod", {"address": "https://prod:8265"})
    assert user.config.read_text(encoding="utf-8") == before  # the old file, whole
    assert sorted(p.name for p in user.config.parent.iterdir()) == ["config.toml", "config.toml.lock"]


def _add_many(path: str, prefix: str) -> None:
    for i in range(6):
        contexts.add_context(f"{prefix}{i}", {"address": f"http://{prefix}{i}:8265"}, path=Path(path))


def test_concurrent_adds_lose_nothing(user: User) -> None:
    """Two processes adding at once: the lock serializes read-modify-write, so every context is there."""
    with ProcessPoolExecutor(max_workers=2) as pool:
        done = [pool.submit(_add_many, str(user.config), prefix) for prefix in ("a", "b")]
        for future in done:
            future.result(timeout=120)
    names = set(contexts.read_config(user.config).contexts)
    assert names == {f"{p}{i}" for p in "ab" for i in range(6)}


# --- the project config's values: the same checks as a context's (spec.contexts.check_settings) --------------


@pytest.mark.parametrize(("text", "expected"), [
    ('headers = "x"\n', "headers must be a table"),
    ("address = 3\n", "address must be a non-empty string"),
    ("storage = 3\n", "storage must be a non-empty string"),
    ("compute_config = 3\n", "compute_config must be a non-empty string"),
    ('verify_tls = "no"\n', "verify_tls must be true or false"),
    ('storage_check = "off"\n', "storage_check must be true or false"),
    ('headers = {X-Team = 3}\n', "header 'X-Team' must be a string"),
    ('headers = {"X Team" = "ml"}\n', "'X Team'"),
    ('headers = {X-Team = "ml\\nInjected: 1"}\n', "control character"),
    ('address = {env = "VAR"}\n', "address must be a non-empty string"),
])
def test_a_wrong_value_in_the_project_config_is_one_line_naming_the_file_and_key(user, capsys, text, expected):
    (user.project / "rtjob.toml").write_text(text, encoding="utf-8")
    err = one_error(cli(capsys, "render", "hello", "-o", "json"))
    assert f"{user.project / 'rtjob.toml'}: " in err and expected in err, err


def test_a_wrong_value_in_tool_rtjob_names_the_table(user, capsys):
    user.project_config("verify_tls = 0\n")
    err = one_error(cli(capsys, "render", "hello", "-o", "json"))
    assert f"{user.project / 'pyproject.toml'}: [tool.rtjob]: verify_tls must be true or false" in err, err


def test_valid_project_config_values_are_used(user, capsys):
    (user.project / "rtjob.toml").write_text(
        'address = "http://head:8265"\nverify_tls = false\nheaders = {X-Team = "ml"}\n', encoding="utf-8")
    settings = load_settings({}, user.project)
    assert (settings.get("address"), settings.get("verify_tls"), settings.get("headers")) == \
        ("http://head:8265", False, {"X-Team": "ml"})


# --- a context's references are resolved only when a command reads the setting --------------------------------

UNRESOLVABLE = 'current = "prod"\n[contexts.prod]\naddress = "http://prod:8265"\nheaders = {X-Token = {file = "missing"}}\n'


def test_an_unresolvable_reference_that_is_overridden_or_unused_breaks_nothing(user, capsys):
    user.write(UNRESOLVABLE)
    proc = cli(capsys, "render", "hello", "-o", "json", "--header", "X-Token: from-flag")
    assert proc.returncode == 0 and json.loads(proc.stdout)["backend"] == "ray", proc.stderr
    assert cli(capsys, "context", "list").returncode == 0  # a command that reads no setting at all
    settings = load_settings({"headers": {"X-Token": "from-flag"}}, user.project)
    assert settings.get("headers") == {"X-Token": "from-flag"}  # the flag wins: the file is never read


def test_an_unresolvable_reference_a_command_needs_is_one_line(user, capsys):
    user.write(UNRESOLVABLE)
    err = one_error(cli(capsys, "render", "hello", "-o", "json"))
    assert "context prod" in err and "X-Token" in err and "cannot read" in err and "missing" in err, err


def test_a_resolved_reference_is_fed_to_the_redactor_when_read(user, capsys):
    secret = plant("s3cr3t-token-value")
    (user.config.parent).mkdir(parents=True, exist_ok=True)
    (user.config.parent / "token").write_text(secret, encoding="utf-8")
    user.write(UNRESOLVABLE.replace('"missing"', '"token"'))
    settings = load_settings({}, user.project)
    assert secret not in REDACTOR._values  # not read yet: not resolved
    assert settings.get("headers") == {"X-Token": secret}
    assert secret not in REDACTOR.text(f"token {secret}")
