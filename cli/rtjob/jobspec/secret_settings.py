"""The `secrets` setting (a context's, or the project config's): ``NAME = "REFERENCE"`` entries that every job run
there gets, resolved on the cluster as a job's own `secrets:` are (core/secret_refs.py: references only, never a
value). A job's own entry of the same name wins; a job that sets the name in env_vars, or runs without the
companion, is refused in one line; so is a job with client-held secrets and no companion (``companion_of``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

from ..core import secret_refs
from ..core.errors import BadInput

EXAMPLE = 'secrets = {HF_TOKEN = "aws-sm://team/hf#token", WANDB_API_KEY = "ssm://team/wandb"}'


def check(value: Any, at: Callable[[tuple[str, ...]], str]) -> None:
    """The setting's table checked (``at``: a key path's file:line), as a job's `secrets:` is."""
    if not isinstance(value, dict) or not value:
        raise BadInput(f"{at(('secrets',))}: secrets must be a table of NAME = \"REFERENCE\", e.g. {EXAMPLE}")
    for name, reference in value.items():
        try:
            secret_refs.check_name(str(name))
            if not isinstance(reference, str):
                raise ValueError("must be a reference string (aws-sm://, ssm://, file:///, env:)")
            secret_refs.parse(reference)
        except ValueError as exc:
            raise BadInput(f"{at(('secrets', str(name)))}: secrets.{name}: {exc}") from None


def applied(spec: Any, shown: str, settings: Any) -> Any:
    """The job's spec with the setting's secrets it does not name itself (the spec as it is when there are none)."""
    table = settings.get("secrets") or {}
    added = {name: str(ref).strip() for name, ref in table.items() if name not in spec.secrets}
    if not added:
        return spec
    source = settings.source("secrets")
    clash = sorted(set(added) & set(spec.env_vars))
    if clash:
        raise BadInput(f"{shown}: env_vars sets {clash[0]}, which the secrets setting ({source}) names; keep it in "
                       "one of them")
    if not spec.companion:
        raise BadInput(f"{shown}: companion: false, but the secrets setting ({source}) needs the companion to "
                       "resolve them on the cluster")
    # an env: entry unset here is the setting's to fix, not the job file's: said against its source now
    secret_refs.client_values(added, os.environ, source)
    return spec.model_copy(update={"secrets": {**added, **spec.secrets}})


def companion_of(spec: Any, shown: str, sealed_env: dict[str, str]) -> bool:
    """Whether the run goes under the companion (the job's `companion:`; RTJOB_COMPANION=0 here turns it off).
    Off, a job with client-held secrets (forwarded AWS credentials, notify URLs: ``sealed_env``) is refused in one
    line: nothing on the cluster would unseal them, and as env_vars they would travel in Ray's job info."""
    on = bool(spec.companion) and os.environ.get(contract.ENV_COMPANION) != "0"
    if not on and sealed_env:
        what = " and ".join(dict.fromkeys("the forwarded AWS credentials" if name.startswith("AWS_") else
                                          "the notify URLs" for name in sorted(sealed_env)))
        off = "companion: false" if not spec.companion else f"{contract.ENV_COMPANION}=0"
        raise BadInput(f"{shown}: {off} leaves nothing on the cluster to unseal {what}, and as env_vars they "
                       "would travel in Ray's job info: run it with the companion, or let the cluster use its own "
                       "credentials (an instance role, no --forward-aws-credentials) and drop its notify targets")
    return on
