"""The plain request every backend plans, and the progress callback a backend reports through: below base.py and
capabilities.py, which both speak of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import rtjob_contract as contract

R = TypeVar("R", bound="Request")
# A pipeline step's own variables: the pipeline's supervisor, which starts from its first step's env (the storage
# credentials, the notify targets), leaves them out on either backend.
STEP_ONLY_ENV = (contract.ENV_COMPANION, contract.ENV_RUN_NAME, contract.ENV_STEP_NAME, contract.ENV_INPUT_URI,
                 contract.ENV_STEP_URIS, contract.ENV_RUN_DIR, contract.ENV_TIME_LIMIT_S)

Log = Callable[[str], None]


@dataclass
class Request:
    """What ``submit`` sends: plain data (no reference back to the job) that round-trips through JSON, so it
    can be printed (render, --dry-run), stored with the run and compared."""

    run_id: str
    job_file: str
    notes: list[str]  # what the user should know about this request (printed by render and submit)

    def to_json(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


@dataclass
class SealingRequest(Request):
    """A request whose client-held secrets travel in the sealed package (backends/sealed_package.py): ``sealed``
    the values of the job's env: references, ``sealed_env`` the run side's variables (forwarded AWS credentials,
    notify URLs). Never recorded or compared (``to_json``), never printed (repr; the redactor knows them)."""

    sealed: dict[str, str] = field(default_factory=dict, repr=False, compare=False, kw_only=True)
    sealed_env: dict[str, str] = field(default_factory=dict, repr=False, compare=False, kw_only=True)
    # A pipeline hosted as one job (Anyscale): each step's own {"values": sealed, "env": sealed_env}, [] for none.
    sealed_steps: list[dict[str, dict[str, str]]] = field(default_factory=list, repr=False, compare=False,
                                                          kw_only=True)

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        for name in ("sealed", "sealed_env", "sealed_steps"):
            data.pop(name, None)
        return data

    def sealed_names(self) -> list[str]:
        return sorted({*self.sealed, *self.sealed_env, *(n for s in self.sealed_steps for p in s.values() for n in p)})

    def sealed_values(self) -> list[str]:
        return [*self.sealed.values(), *self.sealed_env.values(),
                *(v for s in self.sealed_steps for p in s.values() for v in p.values())]
