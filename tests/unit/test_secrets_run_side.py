"""Issue 45 on the run side: a reference the node may not read fails the run in one line, each attempt resolves its
references anew, the sealed variables reach every run-side process, and a tracker's token from `secrets:` reaches
the tracker and nothing else. Real servers on loopback: moto's server with IAM on, an HTTP server that keeps what
it was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.core import secret_refs
from rtjob.core.redact import REDACTOR
from rtjob.runside.secret_env import RunSecrets, unseal
from support.cli import plant, record
from support.mlflow_stub import Call, mlflow_stub
from support.s3_server import REGION, process_server

import rtjob_contract as contract

LOCKED = plant("locked-secret-value-4e3d2c")
ROTATED = (plant("rotated-value-first-81a"), plant("rotated-value-second-92b"))
MLFLOW_TOKEN = plant("mlflow-token-from-secrets-6f5e")


def _refs(**refs: str) -> dict[str, str]:
    return {secret_refs.ENV_SECRETS: json.dumps(refs), contract.ENV_RUN_NAME: "r-1"}


def test_a_reference_the_node_may_not_read_fails_the_run_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto with IAM on: the node's credentials (a user allowed S3 only) are refused the secret. The run ends before
    its script with one line naming the reference and why, said once; never the value, never a traceback."""
    import boto3
    import requests

    with process_server() as (server, _proc):
        setup = {"endpoint_url": server.endpoint, "region_name": REGION, "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        boto3.client("secretsmanager", **setup).create_secret(Name="team/locked", SecretString=LOCKED)
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="node")
        iam.put_user_policy(UserName="node", PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="node")["AccessKey"]
        assert requests.post(f"{server.endpoint}/moto-api/reset-auth", data=b"0", timeout=10).ok
        for name, value in {"AWS_ENDPOINT_URL": server.endpoint, "AWS_REGION": REGION,
                            "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
                            "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(name, value)
        said: list[str] = []
        run_secrets = RunSecrets(_refs(WANDB_API_KEY="aws-sm://team/locked"), said.append)
        ended = run_secrets.start("echo never", {}, None).poll()
    record(*said)  # what the run side printed: the suite's secret check reads it too
    assert said == [ended.reason] and ended.code == 1
    assert ended.reason == ("secrets.WANDB_API_KEY: aws-sm://team/locked could not be resolved: access denied "
                            "(HTTP 403); the script was not started")
    assert LOCKED not in ended.reason and "Traceback" not in ended.reason and not run_secrets.values


def test_a_reference_whose_service_is_unreachable_fails_the_run_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's SSM endpoint answers nothing (a loopback port no server listens on): the run ends before its
    script, the reason "unreachable", in one line."""
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": REGION,
                        "AWS_ACCESS_KEY_ID": "node", "AWS_SECRET_ACCESS_KEY": "node", "AWS_MAX_ATTEMPTS": "1",
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    said: list[str] = []
    ended = RunSecrets(_refs(HF_TOKEN="ssm://team/hf"), said.append).start("echo never", {}, None).poll()
    record(*said)
    assert said == [ended.reason] and ended.code == 1
    assert ended.reason == ("secrets.HF_TOKEN: ssm://team/hf could not be resolved: unreachable; the script was not "
                            "started"), ended.reason


def test_each_attempt_resolves_its_references_anew(tmp_path: Path) -> None:
    """A retry's companion resolves again: a secret rotated between the attempts reaches the second attempt, and
    the first attempt's value is still masked (the redactor keeps both)."""
    secret = tmp_path / "token"
    env = _refs(HF_TOKEN=f"file://{secret}")
    seen = []
    for value in ROTATED:  # attempt 1, then the token is rotated, then attempt 2 (its own companion)
        secret.write_text(value + "\n")
        attempt = RunSecrets(env, lambda line: None)  # no Ray here: the values stay with the entrypoint
        seen.append(attempt.values["HF_TOKEN"])
    assert seen == list(ROTATED)
    masked = REDACTOR.text(f"{ROTATED[0]} {ROTATED[1]}")
    record(masked)
    assert masked == "**** ****"


def test_the_sealed_variables_reach_the_run_sides_environment_and_the_redactor(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The sealed package as Ray unpacks it among the py_modules: `unseal` gives a run-side process the forwarded
    credentials and notify URLs; a variable the job sets itself keeps its value."""
    folder = tmp_path / secret_refs.SEALED_PACKAGE
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    hook = plant("https://hooks.example/unseal-secret-path-3c2b")
    (folder / secret_refs.SEALED_ENV_FILE).write_text(json.dumps({"SIDE_HOOK": hook, "AWS_REGION": "sealed"}))
    monkeypatch.syspath_prepend(str(tmp_path))
    environ = {"AWS_REGION": "the-jobs-own"}
    assert unseal(environ) == {"SIDE_HOOK": hook, "AWS_REGION": "sealed"}
    assert environ == {"AWS_REGION": "the-jobs-own", "SIDE_HOOK": hook}
    masked = REDACTOR.text(f"posting to {hook}")
    record(masked)
    assert masked == "posting to ****"


def test_a_hosted_pipelines_package_gives_each_step_its_own_values(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The package a pipeline's Anyscale job carries, made as submit makes it: the supervisor's own variables in
    env.json, each step's in steps.json, which the supervisor reads to seal them again for that step alone."""
    import importlib
    import shutil
    import sys

    from rtjob.backends.sealed_package import sealed_folder

    token, hook = plant("step-two-token-7d6c5b"), plant("https://hooks.example/step-secret-4e3d")
    steps = [{"values": {}, "env": {"HOOK": hook}}, {"values": {"TOKEN": token}, "env": {"HOOK": hook}}]
    with sealed_folder({}, {"HOOK": hook}, steps) as folder:
        assert folder is not None
        shutil.copytree(folder, tmp_path / secret_refs.SEALED_PACKAGE)  # as the cloud keeps it
    assert not Path(folder).exists()  # submit's own copy lives only while it uploads
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, secret_refs.SEALED_PACKAGE, raising=False)
    importlib.invalidate_caches()
    assert secret_refs.sealed_step(1) == ({"TOKEN": token}, {"HOOK": hook})
    assert secret_refs.sealed_step(0) == ({}, {"HOOK": hook}) and secret_refs.sealed_step(2) == ({}, {})
    assert secret_refs.sealed(secret_refs.SEALED_ENV_FILE) == {"HOOK": hook}
    assert REDACTOR.text(f"step 2 got {token}") == "step 2 got ****"
    with sealed_folder({}, {}, [{"values": {}, "env": {}}]) as nothing:
        assert nothing is None  # nothing to seal: no package


@pytest.fixture
def tracker() -> Iterator[tuple[str, list[Call]]]:
    with mlflow_stub() as served:
        yield served


def test_a_trackers_token_from_secrets_reaches_the_tracker_and_nothing_rtjob_writes(tmp_path: Path, tracker) -> None:
    """`secrets: {MLFLOW_TRACKING_TOKEN: file://...}` with `tracking: mlflow`: the companion resolves it, its mirror
    sends it as MLflow's client does (a bearer token) on every call; RTJOB_TRACKING, which Ray's job info shows,
    holds none of it, and neither do the params and tags the tracker is sent."""
    from rtjob.jobspec.tracking import MlflowTracking, Tracking, tracking_env
    from rtjob.runside.tracking.mirrors import mirror_for

    url, got = tracker
    (tmp_path / "token").write_text(MLFLOW_TOKEN + "\n")
    job_env = {**_refs(MLFLOW_TRACKING_TOKEN=f"file://{tmp_path / 'token'}"),
               **tracking_env(Tracking(mlflow=MlflowTracking(tracking_uri=url)), {"lr": 0.1}, "tok", "ray",
                               "job.yaml", tmp_path, {})}
    record(json.dumps(job_env))  # what the request (and Ray's job info) carries: the suite checks it holds no token
    said: list[str] = []
    run_secrets = RunSecrets(job_env, said.append)
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 1.0, "loss": 0.5}) + "\n")
    mirrors = mirror_for({**job_env, **run_secrets.values}, "r-1", str(rows), said.append, lambda t: None)
    assert mirrors is not None
    mirror = mirrors.mlflow
    assert mirror is not None
    mirror.tick(final=True)
    record(*said, repr(mirror.__dict__))
    assert got and {headers.get("Authorization") for _, headers, _ in got} == {f"Bearer {MLFLOW_TOKEN}"}
    assert all(MLFLOW_TOKEN.encode() not in body for _, _, body in got)  # params and tags: never the token


STAND_IN_WANDB = """
got = {}
class Settings:
    def __init__(self, **kwargs):
        got["settings"] = kwargs
class _Mode:
    mode = "online"
class _Run:
    step, url, dir, settings = 0, "https://wandb.example/r", "/nowhere/files", _Mode()
    def define_metric(self, *args, **kwargs): pass
    def log(self, *args, **kwargs): pass
    def finish(self, **kwargs): got["finish"] = kwargs
def init(**kwargs):
    got["init"] = kwargs
    return _Run()
"""


def test_a_wandb_key_from_secrets_reaches_wandbs_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`secrets: {WANDB_API_KEY: file://...}` with `tracking: wandb`: the key the companion resolved goes to W&B's
    own Settings (the companion's process environment never had it, so W&B would not have read it there). W&B's
    cloud, which the key is for, cannot run here: a stand-in `wandb` module records what `init` is given."""
    import importlib
    import sys

    from rtjob.jobspec.tracking import Tracking, WandbTracking, tracking_env
    from rtjob.runside.tracking.mirrors import mirror_for

    key = plant("wandb-key-0f9e8d7c6b5a")
    (tmp_path / "key").write_text(key + "\n")
    (tmp_path / "stand_in" / "wandb").mkdir(parents=True)
    (tmp_path / "stand_in" / "wandb" / "__init__.py").write_text(STAND_IN_WANDB)
    monkeypatch.syspath_prepend(str(tmp_path / "stand_in"))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    importlib.invalidate_caches()
    job_env = {**_refs(WANDB_API_KEY=f"file://{tmp_path / 'key'}"),
               **tracking_env(Tracking(wandb=WandbTracking(project="p")), {"lr": 0.1}, "w", "ray", "job.yaml",
                              tmp_path, {})}
    said: list[str] = []
    run_secrets = RunSecrets(job_env, said.append)
    (tmp_path / "rows").mkdir()
    mirrors = mirror_for({**job_env, **run_secrets.values}, "r-1", str(tmp_path / "rows"), said.append,
                         lambda t: None)
    assert mirrors is not None and mirrors.wandb is not None
    mirrors.wandb.finish("SUCCEEDED", within_s=10)
    import wandb  # the stand-in, as the mirror imported it

    assert wandb.got["settings"]["api_key"] == key and "finish" in wandb.got, said  # type: ignore[attr-defined]
    given = {k: v for k, v in wandb.got["init"].items() if k != "settings"}  # type: ignore[attr-defined]
    assert key not in json.dumps(job_env) and key not in json.dumps(given)  # its config: args and tags, no key

def test_the_entrypoints_job_config_gets_the_setup_hook_only_where_it_names_none() -> None:
    """Where the request could not name Ray's worker_process_setup_hook (Anyscale's JobConfig), the companion puts it,
    and the run's name the hook reads its values under, in the job config Ray hands the entrypoint; a hook the
    request named (rtjob's on Ray, or the job's own) is kept; without a job config (not under Ray) nothing is added."""
    from rtjob.runside.child_env import child_env

    def config(env: dict[str, str]) -> dict[str, Any]:
        return json.loads(env["RAY_JOB_CONFIG_JSON_ENV_VAR"])

    given = {contract.ENV_RUN_NAME: "run-1", "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(
        {"runtime_env": {"env_vars": {"A": "1"}, "py_modules": ["gcs://x.zip"]}, "metadata": {"k": "v"}})}
    got = config(child_env(given, None, setup_hook=secret_refs.SETUP_HOOK))
    assert got["runtime_env"] == {"env_vars": {"A": "1", contract.ENV_RUN_NAME: "run-1"}, "py_modules": ["gcs://x.zip"],
                                  "worker_process_setup_hook": secret_refs.SETUP_HOOK}
    assert got["metadata"] == {"k": "v"}
    assert config(child_env(given, None)) == json.loads(given["RAY_JOB_CONFIG_JSON_ENV_VAR"])  # no secrets: as it was

    own = {**given, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {"worker_process_setup_hook": "my.hook"}})}
    assert config(child_env(own, None, setup_hook=secret_refs.SETUP_HOOK))["runtime_env"]["worker_process_setup_hook"] \
        == "my.hook"
    bare = child_env({contract.ENV_RUN_NAME: "run-1"}, None, setup_hook=secret_refs.SETUP_HOOK)
    assert "RAY_JOB_CONFIG_JSON_ENV_VAR" not in bare
