"""Issue 45: `secrets:` references, their grammar, the client-held values and what the request carries."""

from __future__ import annotations

import json

import pytest
from rtjob.backends.ray.request import RayJobRequest
from rtjob.core import secret_refs
from rtjob.core.errors import BadInput
from rtjob.core.redact import is_secret_name
from rtjob.runside.secret_env import Unresolved, resolve


@pytest.mark.parametrize(("text", "kind", "target", "key"), [
    ("aws-sm://team/wandb#api_key", "aws-sm", "team/wandb", "api_key"),
    ("aws-sm://plain", "aws-sm", "plain", None),
    ("ssm://prod/db/password", "ssm", "/prod/db/password", None),
    ("file:///etc/tok", "file", "/etc/tok", None),
    ("env:MY_TOKEN", "env", "MY_TOKEN", None),
])
def test_references_parse(text: str, kind: str, target: str, key: str | None) -> None:
    assert secret_refs.parse(text) == secret_refs.SecretRef(kind, target, key)


@pytest.mark.parametrize("text", ["vault://x", "file://relative", "env:1BAD", "aws-sm://x#", "ssm://", "hunter2"])
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        secret_refs.parse(text)


def test_env_values_come_from_the_client_and_an_unset_one_is_one_line() -> None:
    assert secret_refs.client_values({"A": "env:X", "B": "file:///f"}, {"X": "value-of-x"}, "j.yaml") == {"A": "value-of-x"}
    with pytest.raises(BadInput, match="secrets.A: environment variable X is not set"):
        secret_refs.client_values({"A": "env:X"}, {}, "j.yaml")


def test_the_sealed_values_are_never_recorded() -> None:
    request = RayJobRequest("r", "j.yaml", [], sealed={"A": "value-of-x"})
    assert "value-of-x" not in str(request.to_json()) and "value-of-x" not in repr(request)


def test_the_references_variable_is_shown_not_masked() -> None:
    assert not is_secret_name(secret_refs.ENV_SECRETS)


def test_a_missing_file_fails_with_the_reference_and_why(tmp_path) -> None:
    env = {secret_refs.ENV_SECRETS: json.dumps({"T": f"file://{tmp_path}/none"})}
    with pytest.raises(Unresolved, match=r"secrets.T: file://.*/none could not be resolved: not found"):
        resolve(env)
    (tmp_path / "none").write_text("file-secret-value\n")
    assert resolve(env) == {"T": "file-secret-value"}


def test_secret_manager_and_ssm_references_resolve_through_the_nodes_aws_settings(shared_s3, monkeypatch) -> None:
    """aws-sm:// and ssm:// against a real AWS-protocol server on loopback (moto's server, in a thread: it serves
    Secrets Manager and SSM beside S3), reached through the node's standard settings (AWS_ENDPOINT_URL, the
    region, its credentials) as the companion reaches them on the driver's node. Found, a JSON secret's key, not
    found, a key the secret lacks: each a value or one worded line, never the value in the line."""
    import boto3

    for name, value in shared_s3.env().items():
        monkeypatch.setenv(name, value)
    sm, ssm = boto3.client("secretsmanager"), boto3.client("ssm")
    sm.create_secret(Name="team/wandb", SecretString=json.dumps({"api_key": "sm-json-value-5f1"}))
    sm.create_secret(Name="team/plain", SecretString="sm-plain-value-77c")
    ssm.put_parameter(Name="/prod/db/password", Value="ssm-value-9d2", Type="SecureString")

    refs = {"A": "aws-sm://team/wandb#api_key", "B": "aws-sm://team/plain", "C": "ssm://prod/db/password"}
    assert resolve({secret_refs.ENV_SECRETS: json.dumps(refs)}) == {
        "A": "sm-json-value-5f1", "B": "sm-plain-value-77c", "C": "ssm-value-9d2"}
    for reference, why in [("aws-sm://team/none", "not found"), ("ssm://prod/none", "not found"),
                           ("aws-sm://team/wandb#nokey", "the secret is not JSON with the key 'nokey'")]:
        with pytest.raises(Unresolved, match=f"secrets.T: .* could not be resolved: {why}") as raised:
            resolve({secret_refs.ENV_SECRETS: json.dumps({"T": reference})})
        assert "sm-json-value-5f1" not in str(raised.value)
