"""The plain request every backend plans, and the progress callback a backend reports through: below base.py and
capabilities.py, which both speak of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

R = TypeVar("R", bound="Request")

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
