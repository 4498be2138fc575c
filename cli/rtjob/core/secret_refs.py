"""A job's ``secrets:``: ``NAME: REFERENCE``, the references' grammar, and the names both sides of a run share.

The grammar (issue 45):

* ``aws-sm://NAME[#KEY]``: AWS Secrets Manager; NAME is everything up to ``#`` (``/`` included, as AWS spells
  names); ``#KEY`` picks one key of a JSON secret.
* ``ssm://PATH``: SSM Parameter Store, the parameter ``/PATH`` (SecureString, decrypted).
* ``file:///ABSOLUTE/PATH``: a file on the driver's node (its content, one trailing newline dropped).
* ``env:VAR``: this client's environment (for clusters with no secret manager): the only kind the client reads.

The client sends references only (``RTJOB_SECRET_REFS``: JSON ``{NAME: REFERENCE}``, never a value) and, for ``env:``
ones, their values in the sealed package (a ``py_modules`` folder named ``SEALED_PACKAGE``, never ``env_vars``). The
companion resolves the rest on the driver's node, hands the values to the entrypoint's environment and, through
Ray's internal KV (``KV_NAMESPACE``, key ``kv_key(run id)``), to every Ray worker of the run
(runside/secret_env.py: the ``worker_process_setup_hook``).

The grammar is pure (stdlib only): the client's spec layer and the run side both parse with it. ``sealed`` and
``unseal`` read the sealed package on the run side: every process rtjob runs there (companion, supervisor, sync
job, each Ray worker, a queue's keeper) unseals first.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

import rtjob_contract as contract

ENV_SECRETS = contract.ENV_SECRET_REFS  # {NAME: REFERENCE} as JSON: references, never values (shown: redact.py)
SEALED_PACKAGE = "rtjob_sealed"  # the py_modules folder that carries the client-held values
SEALED_FILE = "values.json"  # inside it: {NAME: value} of the env: references
SEALED_ENV_FILE = "env.json"  # and {VARIABLE: value}: forwarded AWS credentials, notify URLs (the run side's env)
SEALED_STEPS_FILE = "steps.json"  # and [{"values": {...}, "env": {...}}, ...]: a hosted pipeline's steps' own
KV_NAMESPACE = "rtjob-secrets"  # Ray's internal KV: where the companion leaves the values for the run's workers
SETUP_HOOK = "rtjob.runside.secret_env.setup"  # the worker_process_setup_hook (a module path: the job info shows it)
NOT_STARTED = "the script was not started"  # ends the companion's line for a reference it could not resolve

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_AWS_NAME = re.compile(r"^[A-Za-z0-9/_+=.@!-]{1,512}$")  # Secrets Manager's characters (and an ARN's ':' below)
_SSM_PATH = re.compile(r"^[A-Za-z0-9/_.-]{1,1011}$")
KINDS = ("aws-sm://", "ssm://", "file://", "env:")


@dataclass(frozen=True)
class SecretRef:
    """One parsed reference: ``kind`` aws-sm | ssm | file | env; ``target`` the secret's name, the parameter's
    path, the file or the variable; ``key`` a JSON secret's key (aws-sm only)."""

    kind: str
    target: str
    key: str | None = None

    def __str__(self) -> str:
        if self.kind == "env":
            return f"env:{self.target}"
        if self.kind == "file":
            return f"file://{self.target}"
        if self.kind == "ssm":
            return f"ssm://{self.target.lstrip('/')}"
        return f"aws-sm://{self.target}" + (f"#{self.key}" if self.key else "")


def parse(reference: str) -> SecretRef:
    """The reference, or ValueError saying what is wrong (never a value: a reference holds none)."""
    text = reference.strip()
    if text.startswith("env:"):
        var = text[len("env:"):]
        if not _NAME.match(var):
            raise ValueError("env:VAR takes an environment variable's name (letters, digits, _)")
        return SecretRef("env", var)
    if text.startswith("file://"):
        path = text[len("file://"):]
        if not path.startswith("/") or path.endswith("/") or "/../" in f"{path}/":
            raise ValueError("file:///ABSOLUTE/PATH takes an absolute path to a file on the driver's node")
        return SecretRef("file", path)
    if text.startswith("ssm://"):
        path = text[len("ssm://"):].strip("/")
        if not path or not _SSM_PATH.match(path):
            raise ValueError("ssm://PATH takes a parameter path (letters, digits, / _ . -)")
        return SecretRef("ssm", "/" + path)
    if text.startswith("aws-sm://"):
        name, _, key = text[len("aws-sm://"):].partition("#")
        plain = name.replace(":", "") if name.startswith("arn:") else name
        if not name or not _AWS_NAME.match(plain) or ("#" in text and not key):
            raise ValueError("aws-sm://NAME[#KEY] takes a Secrets Manager name or ARN, then #KEY for one key of a "
                             "JSON secret")
        return SecretRef("aws-sm", name, key or None)
    raise ValueError(f"not a secret reference; use one of {', '.join(k + '...' for k in KINDS)}")


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a valid environment variable name (letters, digits, _)")


def kv_key(run_id: str) -> bytes:
    """The run's values in Ray's internal KV (each attempt's companion writes them again, a retry's included)."""
    return f"run/{run_id}".encode()


def client_values(secrets: Mapping[str, str], environ: Mapping[str, str], where: str) -> dict[str, str]:
    """The values this client holds for the run (``env:`` references), each a secret of this process from now on;
    BadInput (exit 2) naming the entry and the variable (never a value) when one is unset."""
    from .errors import BadInput
    from .redact import REDACTOR

    values: dict[str, str] = {}
    for name, reference in secrets.items():
        ref = parse(reference)
        if ref.kind != "env":
            continue
        value = environ.get(ref.target, "")
        if not value.strip():
            raise BadInput(f"{where}: secrets.{name}: environment variable {ref.target} is not set here (env: "
                           "references are read from this client's environment)")
        values[name] = value
    REDACTOR.add(values.values())
    return values


def _sealed_path(file: str) -> str | None:
    """``file`` of the sealed package (a py_modules folder on this process's path: the run's job and every job
    rtjob starts for it from its job info), or None without the package or that file."""
    import importlib.util

    spec = importlib.util.find_spec(SEALED_PACKAGE)
    path = os.path.join(os.path.dirname(spec.origin), file) if spec is not None and spec.origin else None
    return path if path is not None and os.path.exists(path) else None


def sealed(file: str) -> dict[str, str]:
    """One {name: value} file of the sealed package; {} without it."""
    path = _sealed_path(file)
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def sealed_step(index: int) -> tuple[dict[str, str], dict[str, str]]:
    """Step ``index``'s (values, env) from the sealed package's steps file (a pipeline hosted as one Anyscale job:
    its supervisor seals them again for that step alone), each a secret of this process; ({}, {}) without one."""
    from .redact import REDACTOR

    path = _sealed_path(SEALED_STEPS_FILE)
    if path is None:
        return {}, {}
    with open(path, encoding="utf-8") as f:
        steps = json.load(f)
    step = steps[index] if isinstance(steps, list) and 0 <= index < len(steps) else {}
    values, env = ({str(k): str(v) for k, v in (step.get(part) or {}).items()} for part in ("values", "env"))
    REDACTOR.add([*values.values(), *env.values()])
    return values, env


def unseal(environ: MutableMapping[str, str]) -> dict[str, str]:
    """The sealed variables (forwarded AWS credentials, notify URLs) into ``environ``, each a secret of this process
    from now on; a variable already set keeps its value. Returns what was sealed."""
    from .redact import REDACTOR

    try:
        values = sealed(SEALED_ENV_FILE)
    except (OSError, ValueError):
        return {}
    REDACTOR.add(values.values())
    for name, value in values.items():
        environ.setdefault(name, value)
    return values
