"""Secrets never reach rtjob's output: env var values that look secret (from the YAML or --env), header
values, Ray's auth token, in render's text, JSON, --explain, the equivalent command and error lines."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from rtjob.core.redact import MASK, is_secret, is_secret_name, mask_mapping, redact, secret_values
from support.cli import plant, run_in_process
from support.scrub import scrubbed_environ

NOWHERE = "http://127.0.0.1:9"  # never contacted by render

# name → secret value; each value is distinctive so that any leak is found by a plain substring search.
YAML_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzYAMLKEY1",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7YAMLKEY",
    "MY_TOKEN": "tok-from-yaml-5f3c9a",
    "DB_PASSWORD": "pw-from-yaml-hunter2",
    "WANDB_API_KEY": "wandb-from-yaml-0123456789abcdef",
    "GATEWAY_HEADER": "Bearer gw-from-yaml-abcdef",  # secret by its value, whatever the name
    "S3_ID": "AKIAI44QH8DHBYAMLXYZ",  # an AWS key id by its value
}
LOCAL_PROFILE_SECRET = ("LOCAL_DB_PASSWORD", "pw-from-local-profile-42")
FLAG_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzFLAGKEY1",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7FLAGKEY",
    "MY_TOKEN": "tok-from-flag-77aa01",
    "DB_PASSWORD": "pw-from-flag-hunter3",
    "WANDB_API_KEY": "wandb-from-flag-fedcba9876543210",
    "UPSTREAM": "Bearer up-from-flag-123456",
}
PUBLIC = {"WANDB_PROJECT": "visible-project-name", "WANDB_MODE": "offline"}
HEADER_TOKEN = "xyz"  # --header 'Authorization: Bearer xyz'
API_KEY_HEADER = "hdr-api-key-31337"
RAY_TOKEN = "ray-auth-token-from-env-0badc0de"
URL_PASSWORD = "url-pass-word-5e5e5e"  # --address http://alice:URL_PASSWORD@127.0.0.1:9

SECRET_JOB = "\n".join([
    "name: secretive",
    "entrypoint: python train.py",
    "env_vars:",
    *[f"  {k}: {json.dumps(v)}" for k, v in {**YAML_SECRETS, **PUBLIC}.items()],
    "local:",
    "  env_vars:",
    f"    {LOCAL_PROFILE_SECRET[0]}: {LOCAL_PROFILE_SECRET[1]}",
    "",
])
PLAIN_JOB = "name: plain\nentrypoint: python train.py\n"
ALL_SECRETS = [*YAML_SECRETS.values(), LOCAL_PROFILE_SECRET[1], *FLAG_SECRETS.values(), API_KEY_HEADER, RAY_TOKEN,
               "Bearer xyz", "hunter2", "hunter3", URL_PASSWORD]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """All CLI calls of this module, through its console entry point in this process (a subprocess costs a
    second to start)."""
    project = tmp_path_factory.mktemp("project")
    (project / "jobs").mkdir()
    (project / "jobs" / "secretive.yaml").write_text(SECRET_JOB)
    (project / "jobs" / "plain.yaml").write_text(PLAIN_JOB)
    home = tmp_path_factory.mktemp("home")
    env = scrubbed_environ()
    env.update(RTJOB_HOME=str(home), HOME=str(home / "user"), RTJOB_PROJECT=str(project))
    flag_env = [a for k, v in {**FLAG_SECRETS, **PUBLIC}.items() for a in ("--env", f"{k}={v}")]
    headers = ["--header", f"Authorization: Bearer {HEADER_TOKEN}", "--header", f"X-Api-Key: {API_KEY_HEADER}",
               "--header", "X-Team: ml"]
    ray = ["--backend", "ray", "--address", NOWHERE, "--explain", "--env", f"WANDB_PROJECT={PUBLIC['WANDB_PROJECT']}"]
    calls: dict[str, tuple[list[str], dict[str, str]]] = {
        "yaml-text": (["render", "secretive"], env),
        "yaml-json": (["render", "secretive", "--output", "json"], env),
        "flag-text": (["render", "plain", *flag_env, *ray, *headers], env),
        "flag-json": (["render", "plain", *flag_env, *ray, *headers, "--output", "json"], env),
        "token-text": (["render", "plain", *ray], {**env, "RAY_AUTH_TOKEN": RAY_TOKEN}),
        "url-text": (["render", "plain", *ray, "--address", f"http://alice:{URL_PASSWORD}@127.0.0.1:9"], env),
        "url-json": (["render", "plain", *ray, "--address", f"http://alice:{URL_PASSWORD}@127.0.0.1:9",
                      "--output", "json"], env),
        "url-unreachable": (["status", "some-run", "--backend", "ray",
                             "--address", f"http://alice:{URL_PASSWORD}@127.0.0.1:9"], env),
        # Malformed flags must not echo the value they carry.
        "bad-header": (["render", "plain", "--header", f"Authorization Bearer {HEADER_TOKEN}"], env),
        "bad-env": (["render", "plain", "--env", f"DB_PASSWORD {FLAG_SECRETS['DB_PASSWORD']}"], env),
    }

    for secret in ALL_SECRETS:  # the suite-wide check looks for them in every output, not only here
        plant(secret)
    return {name: run_in_process(*args, env=run_env, cwd=project) for name, (args, run_env) in calls.items()}


def _assert_no_secret(proc: subprocess.CompletedProcess[str]) -> None:
    text = proc.stdout + proc.stderr
    for secret in ALL_SECRETS:
        assert secret not in text, f"secret {secret!r} leaked:\n{text}"


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    _assert_no_secret(proc)
    return proc.stdout


def _equivalent(text: str) -> list[str]:
    line = text.split("\nequivalent:\n", 1)[1].strip()
    return shlex.split(line)


@pytest.mark.parametrize("name", ["yaml-text", "yaml-json", "flag-text", "flag-json", "token-text", "url-text",
                                  "url-json"])
def test_no_secret_anywhere_in_render_output(out, name: str):
    stdout = _ok(out[name])
    assert PUBLIC["WANDB_PROJECT"] in stdout  # non-secret values are shown
    assert MASK in stdout


def test_yaml_env_secrets_are_masked_in_json(out):
    env_vars = json.loads(_ok(out["yaml-json"]))["submit_job"]["runtime_env"]["env_vars"]
    for name in [*YAML_SECRETS, LOCAL_PROFILE_SECRET[0]]:
        assert env_vars[name] == MASK, name
    for name, value in PUBLIC.items():
        assert env_vars[name] == value
    assert env_vars["RTJOB_JOB_NAME"] == "secretive"


def test_yaml_env_secrets_are_masked_in_the_equivalent_command(out):
    argv = _equivalent(_ok(out["yaml-text"]))
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert {k: runtime_env["env_vars"][k] for k in YAML_SECRETS} == dict.fromkeys(YAML_SECRETS, MASK)
    assert runtime_env["env_vars"]["WANDB_PROJECT"] == PUBLIC["WANDB_PROJECT"]
    assert argv[:2] == ["RAY_AUTH_MODE=token", f"RAY_AUTH_TOKEN={MASK}"]


def test_flag_env_secrets_and_headers_are_masked(out):
    data = json.loads(_ok(out["flag-json"]))
    env_vars = data["submit_job"]["runtime_env"]["env_vars"]
    assert {k: env_vars[k] for k in FLAG_SECRETS} == dict.fromkeys(FLAG_SECRETS, MASK)
    assert env_vars["WANDB_PROJECT"] == PUBLIC["WANDB_PROJECT"]
    assert data["headers"] == {"X-Api-Key": MASK, "X-Team": "ml", "Authorization": MASK}
    assert data["explain"]["headers"] == {"value": "(masked)", "source": "flag --headers"}


def test_flag_headers_in_the_equivalent_command(out):
    text = _ok(out["flag-text"])
    argv = _equivalent(text)
    assert argv[:2] == ["RAY_AUTH_MODE=token", f"RAY_AUTH_TOKEN={MASK}"]
    assert json.loads(argv[argv.index("--headers") + 1]) == {"X-Api-Key": MASK, "X-Team": "ml"}
    assert "Authorization" not in argv[argv.index("--headers") + 1]
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert runtime_env["env_vars"]["DB_PASSWORD"] == MASK
    assert "(masked)" in text  # --explain shows the headers setting masked
    assert HEADER_TOKEN not in text


def test_ray_auth_token_from_the_environment_is_masked(out):
    text = _ok(out["token-text"])
    request = json.loads(text.split("\nrequest:\n", 1)[1].split("\nequivalent:\n", 1)[0])
    assert request["headers"] == {"Authorization": MASK}
    argv = _equivalent(text)
    assert argv[:2] == ["RAY_AUTH_MODE=token", f"RAY_AUTH_TOKEN={MASK}"]
    assert "--headers" not in argv


@pytest.mark.parametrize(("name", "flag_name"), [("bad-header", "'Authorization'"), ("bad-env", "'DB_PASSWORD'")])
def test_malformed_flags_do_not_echo_their_value(out, name: str, flag_name: str):
    proc = out[name]
    assert proc.returncode == 2
    _assert_no_secret(proc)
    assert HEADER_TOKEN not in proc.stderr
    assert proc.stderr.startswith("rtjob: error: ") and flag_name in proc.stderr


# -- the masking functions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "MY_TOKEN", "DB_PASSWORD",
                                  "WANDB_API_KEY", "HF_TOKEN", "GITHUB_PAT_TOKEN", "SSH_PRIVATE_KEY", "DB_PASS", "MYSQL_PWD",
                                  "SENTRY_DSN", "AWS_ACCESS_KEY_ID", "apiKey", "api-key",
                                  "Authorization", "Proxy-Authorization", "X-Api-Key", "X-Auth-Token", "Cookie",
                                  "db_passwd", "SESSION_ID", "SIGNING_KEY"])
def test_secret_names(name: str):
    assert is_secret_name(name)
    assert mask_mapping({name: "some-value"}) == {name: MASK}


@pytest.mark.parametrize("name", ["WANDB_PROJECT", "WANDB_MODE", "PYTHONUNBUFFERED", "RTJOB_NUM_WORKERS",
                                  "NCCL_DEBUG", "X-Team", "KEYBOARD_LAYOUT", "MONKEY_COUNT",
                                  "TOKENIZERS_PARALLELISM", "AUTHOR", "SORT_KEY", "KEY", "PWD", "PASSAGE_COUNT",
                                  "AWS_SHARED_CREDENTIALS_FILE", "TOKEN_PATH", "SSH_PRIVATE_KEY_FILE", "SECRETS_DIR"])
def test_public_names(name: str):
    assert not is_secret_name(name)
    assert mask_mapping({name: "visible"}) == {name: "visible"}
    assert secret_values({name: "/dev/null"}) == []  # never hunted in free text ("> /dev/null" stays)


@pytest.mark.parametrize("value", ["AKIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE", "Bearer abc",
                                   "ghp_" + "a" * 36, "xoxb-123-456", "sk-" + "A" * 40])
def test_secret_values_whatever_the_name(value: str):
    assert is_secret("HARMLESS", value)
    assert mask_mapping({"HARMLESS": value}) == {"HARMLESS": MASK}


def test_public_values_and_empty_values():
    assert not is_secret("HARMLESS", "AKIA-not-a-key")
    assert not is_secret("HARMLESS", "mnist")
    assert mask_mapping({"MY_TOKEN": ""}) == {"MY_TOKEN": ""}  # nothing to hide


def test_a_password_in_the_address_becomes_a_masked_basic_auth_header(out):
    """user:password@ in --address: sent as 'Authorization: Basic', shown nowhere (render, JSON, --explain,
    the equivalent command, an error line)."""
    import base64

    text = _ok(out["url-text"])
    assert "backend:   ray  http://127.0.0.1:9\n" in text
    assert f"http://alice:{MASK}@127.0.0.1:9" in text  # --explain shows where the address came from, masked
    command = _equivalent(text)
    assert command[command.index("--address") + 1] == NOWHERE
    assert json.loads(command[command.index("--headers") + 1]) == {"Authorization": MASK}
    data = json.loads(_ok(out["url-json"]))
    assert data["address"] == NOWHERE and data["headers"] == {"Authorization": MASK}
    assert data["explain"]["address"]["value"] == f"http://alice:{MASK}@127.0.0.1:9"
    failed = out["url-unreachable"]
    assert failed.returncode == 3 and failed.stderr.count("\n") == 1, failed.stderr
    _assert_no_secret(failed)
    assert base64.b64encode(f"alice:{URL_PASSWORD}".encode()).decode() not in str(out)

    from rtjob.backends.ray.client import split_credentials
    from rtjob.core.redact import mask_url

    assert split_credentials("http://bob:p%40ss@head:8265") == (
        "http://head:8265", "Basic " + base64.b64encode(b"bob:p@ss").decode())
    assert split_credentials("head:8265") == ("head:8265", None)
    assert mask_url("see https://u:pw@h:1/x and http://h:2") == f"see https://u:{MASK}@h:1/x and http://h:2"


def test_secret_values_and_redact():
    values = {"MY_TOKEN": "abcdefgh", "SHORT_TOKEN": "abc", "WANDB_PROJECT": "proj", "X": "Bearer qq"}
    # Structured fields mask every secret value; free text hunts only those of 6+ characters.
    assert sorted(secret_values(values)) == ["Bearer qq", "abc", "abcdefgh"]
    text = "token abcdefgh then Bearer qq in proj"
    assert redact(text, secret_values(values)) == f"token {MASK} then {MASK} in proj"
    # Longest first, so a secret containing another is masked whole.
    assert redact("xx-secret-long", ["secret", "xx-secret-long"]) == MASK


def test_secret_looking_args_are_masked_in_the_rendered_entrypoint(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "sec.yaml").write_text(
        "name: sec\nentrypoint: python x.py\nargs:\n  api_key: supersecretvalue123\n  epochs: 3\n"
    )
    env = {**os.environ, "RTJOB_PROJECT": str(tmp_path), "RTJOB_HOME": str(tmp_path / "home")}
    for extra in ([], ["--output", "json"], ["--set", "args.hf_token=hf_other_secret_9"]):
        proc = subprocess.run([sys.executable, "-m", "rtjob.main", "render", "sec", *extra], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout + proc.stderr
        assert "supersecretvalue123" not in text and "hf_other_secret_9" not in text
        assert "--epochs 3" in text and MASK in text
