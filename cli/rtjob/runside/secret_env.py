"""A run's `secrets:` on the driver's node: resolved by the companion before the entrypoint starts, given to the
entrypoint's environment and to every Ray worker of the run, and never written where Ray or rtjob keep the job.

In order (issue 45): every reference resolved here, with this node's own credentials (``env:`` values come in the
sealed package, backends/ray/sealed.py); each value added to the redactor before the log parts start; the values
left in Ray's internal KV for the run's workers (``worker_process_setup_hook``: ``setup`` below, named in the
runtime_env by its module path, reads them in each worker process); then the entrypoint started with them, its
output relayed through the redactor (runside/child.py), so Ray's driver log, the followed log and the stored
parts are masked alike. A reference that cannot be resolved fails the run before the script starts, with one line
naming the reference and why (never a value). Each attempt resolves again: a rotated secret is picked up.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import rtjob_contract as contract

from ..core import secret_refs
from ..core.errors import one_line
from ..core.redact import REDACTOR
from ..core.secret_refs import SecretRef, unseal
from .child import Child, ChildExit

RAY_ADDRESS = "RAY_ADDRESS"  # the GCS address Ray's job supervisor gives the driver


class Unresolved(Exception):
    """A reference that could not be resolved: the one line the run fails with."""


def references(env: Mapping[str, str]) -> dict[str, str]:
    """The run's ``{NAME: REFERENCE}`` (RTJOB_SECRET_REFS; none: {})."""
    raw = env.get(secret_refs.ENV_SECRETS) or ""
    try:
        found = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def sealed_values() -> dict[str, str]:
    """The client-held values of the run's ``env:`` references the sealed package brought."""
    return secret_refs.sealed(secret_refs.SEALED_FILE)


def _aws_client(service: str) -> Any:
    import boto3  # the node's standard AWS settings: region, endpoint (AWS_ENDPOINT_URL_<SERVICE>), its role

    # AWS_REGION too, as the AWS SDKs other than this botocore read it (botocore reads AWS_DEFAULT_REGION only)
    return boto3.client(service, region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))


def _aws_reason(exc: Exception) -> str:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) if hasattr(exc, "response") else ""
    if code in ("ResourceNotFoundException", "ParameterNotFound"):
        return "not found"
    if code in ("AccessDeniedException", "AccessDenied", "UnrecognizedClientException"):
        return f"access denied ({code})"
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") \
        if hasattr(exc, "response") else None
    if status == 403:  # an answer botocore could not parse for its code (a proxy's, moto's XML): still a refusal
        return "access denied (HTTP 403)"
    if type(exc).__name__ in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError"):
        return "unreachable"
    if type(exc).__name__ in ("NoRegionError", "NoCredentialsError"):
        return f"unreachable ({type(exc).__name__}: set AWS_REGION and the node's credentials)"
    return one_line(exc)


def resolve_one(ref: SecretRef, sealed: Mapping[str, str], name: str) -> str:
    """One value; Unresolved with why."""
    if ref.kind == "env":
        if name not in sealed:
            raise Unresolved("not in the sealed package (the client sends env: values with the submit)")
        return sealed[name]
    if ref.kind == "file":
        try:
            with open(ref.target, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise Unresolved("not found on the driver's node") from None
        except PermissionError:
            raise Unresolved("access denied on the driver's node") from None
        return text[:-1] if text.endswith("\n") else text
    try:
        if ref.kind == "ssm":
            answer = _aws_client("ssm").get_parameter(Name=ref.target, WithDecryption=True)
            return str(answer["Parameter"]["Value"])
        text = str(_aws_client("secretsmanager").get_secret_value(SecretId=ref.target)["SecretString"])
    except Exception as exc:  # noqa: BLE001 - worded: not found, access denied, unreachable
        raise Unresolved(_aws_reason(exc)) from None
    if ref.key is None:
        return text
    try:
        return str(json.loads(text)[ref.key])
    except (ValueError, KeyError, TypeError):
        raise Unresolved(f"the secret is not JSON with the key {ref.key!r}") from None


def resolve(env: Mapping[str, str]) -> dict[str, str]:
    """Every value of the run's `secrets:`; Unresolved with the one line that names the first reference that
    failed and why."""
    refs = references(env)
    sealed: dict[str, str] = {}
    if any(secret_refs.parse(r).kind == "env" for r in refs.values()):
        with contextlib.suppress(OSError, ValueError):
            sealed = sealed_values()
    values: dict[str, str] = {}
    for name, reference in refs.items():
        ref = secret_refs.parse(reference)
        try:
            values[name] = resolve_one(ref, sealed, name)
        except Unresolved as exc:
            raise Unresolved(f"secrets.{name}: {ref} could not be resolved: {exc}; {secret_refs.NOT_STARTED}") \
                from None
    return values


class _NotStarted:
    """The entrypoint that never started (a secret not resolved): ends at once with the reason."""

    def __init__(self, reason: str) -> None:
        self.ended = ChildExit(1, reason=reason)

    def poll(self) -> ChildExit:
        return self.ended


class RunSecrets:
    """The companion's part: resolve, publish to the workers, start the entrypoint, withdraw at the end."""

    def __init__(self, env: Mapping[str, str], say: Callable[[str], None]) -> None:
        self.env, self.say = env, say
        self.values: dict[str, str] = {}
        self.failure: str | None = None
        self.published = False
        if not references(env):
            return
        try:
            self.values = resolve(env)
        except Unresolved as exc:
            self.failure = str(exc)
            say(self.failure)
            return
        REDACTOR.add(self.values.values())
        self._publish()

    def _gcs(self) -> Any:
        # Ray 2.60 has no public KV: ray.experimental.internal_kv's functions are underscore-named (no PublicAPI)
        # and work only after ray.init in this process, which would make the companion a second driver of the job
        # (its own entry in Ray's job table, a core worker beside the entrypoint's). They wrap this same client
        # (internal_kv._initialize_internal_kv(GcsClient)): the companion uses it directly, for two calls.
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        return GcsClient(address=self.env[RAY_ADDRESS])

    def _publish(self) -> None:
        run_id = self.env.get(contract.ENV_RUN_NAME) or ""
        try:
            self._gcs().internal_kv_put(secret_refs.kv_key(run_id), json.dumps(self.values).encode(), True,
                                        secret_refs.KV_NAMESPACE.encode())
            self.published = True
        except Exception as exc:  # noqa: BLE001 - the driver has them; the run's Ray workers do not
            self.say(f"the secrets were not given to the run's Ray workers ({type(exc).__name__}): only the "
                     "entrypoint's own process has them")

    def withdraw(self) -> None:
        """The values out of Ray's internal KV once the entrypoint ended (a retry's companion puts them again)."""
        if self.published:
            with contextlib.suppress(Exception):
                self._gcs().internal_kv_del(secret_refs.kv_key(self.env.get(contract.ENV_RUN_NAME) or ""), False,
                                            secret_refs.KV_NAMESPACE.encode())

    def start(self, entrypoint: str, env: Mapping[str, str], time_limit: float | None,
              mask: bool = False) -> Child | _NotStarted:
        """The entrypoint with the values in its environment, its output relayed masked (also with ``mask``: the
        sealed variables, a forwarded secret key or a notify URL, which the script may print too, so Ray's driver
        log never holds them); or, when a reference failed, an end at once."""
        if self.failure is not None:
            return _NotStarted(self.failure)
        if not self.values and not mask:
            return Child(entrypoint, env, time_limit)
        return Child(entrypoint, {**env, **self.values}, time_limit, relay=REDACTOR.text)


def setup() -> None:
    """Ray's ``worker_process_setup_hook`` (every worker process of the run): the sealed variables and the run's
    resolved values into its environment. A worker that starts before the companion published the values (Ray's
    own job supervisor) gets the sealed variables only."""
    unseal(os.environ)
    run_id = os.environ.get(contract.ENV_RUN_NAME)
    if not run_id or secret_refs.ENV_SECRETS not in os.environ:
        return
    from ray.experimental import internal_kv  # a worker is connected: Ray's own client reads the KV

    raw = internal_kv._internal_kv_get(secret_refs.kv_key(run_id), namespace=secret_refs.KV_NAMESPACE)  # noqa: SLF001
    if raw:
        values = json.loads(raw)
        os.environ.update({str(k): str(v) for k, v in values.items()})
        REDACTOR.add(values.values())
