"""The client's settings: their names, their environment variables, and one value per setting that remembers
where it came from (for ``render --explain``).

Both layers that produce settings import this: the project and the environment (project.load_settings) and the
user's contexts (contexts.py). It knows neither of them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.redact import REDACTOR, url_password

# The TOML reader of the files settings come from (the project config, the contexts file), imported from here.
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # noqa: F401

SETTING_KEYS = ("backend", "address", "storage", "compute_config", "headers", "verify_tls", "cloud", "project",
                "notify", "storage_check",  # notify: a table (schema.Notify) with no environment variable of its own
                "tracking",  # a table (jobspec/tracking.Tracking): a job's own `tracking:` wins whole
                "queue", "priority", "queues",  # a run's queue, its priority, [queues.NAME] tables (jobspec/queues.py)
                "secrets")  # NAME = "REFERENCE" every job gets (jobspec/secret_settings.py); a job's own entry wins
# The settings that are true or false (TOML booleans; in the environment 0/false/no/off is false).
BOOLEAN_KEYS = ("verify_tls", "storage_check")
# Environment variables per setting, first match wins (rtjob's own first, then Ray's).
ENV_NAMES: dict[str, tuple[str, ...]] = {
    "backend": ("RTJOB_BACKEND",),
    "address": ("RTJOB_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"),
    "storage": ("RTJOB_STORAGE",),
    "compute_config": ("RTJOB_COMPUTE_CONFIG",),
    "headers": ("RAY_JOB_HEADERS",),
    "verify_tls": ("RTJOB_VERIFY_TLS",),
    # false: a submit does not write the run's record before it sends the run (runs/lifecycle/storage_check.py)
    "storage_check": ("RTJOB_STORAGE_CHECK",),
    "cloud": ("RTJOB_ANYSCALE_CLOUD",),  # Anyscale cloud and project when the job names none
    "project": ("RTJOB_ANYSCALE_PROJECT",),
}


class Deferred:
    """A value worked out on first use (a context's secret reference): a command that never reads the setting,
    or whose setting a higher layer overrides, never needs the reference. ``resolve`` feeds the redactor."""

    def __init__(self, resolve: Callable[[], Any]) -> None:
        self.resolve = resolve


class Setting:
    def __init__(self, value: Any, source: str) -> None:
        self._value = value
        self.source = source

    @property
    def value(self) -> Any:
        if isinstance(self._value, Deferred):
            self._value = self._value.resolve()
        return self._value


def _protect(key: str, value: Any) -> None:
    """Header values and a password in the address are secrets of this process from the moment they are set."""
    if key == "headers" and isinstance(value, dict):
        REDACTOR.add_mapping(value)
    elif key == "address" and isinstance(value, str):
        REDACTOR.add([url_password(value)])


@dataclass
class Settings:
    root: Path
    values: dict[str, Setting] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        setting = self.values.get(key)
        return setting.value if setting else None

    def source(self, key: str) -> str:
        setting = self.values.get(key)
        return setting.source if setting else "unset"

    def half_applied_context(self) -> str | None:
        """The one case where a context applies in part: the address comes from the environment (a RAY_ADDRESS
        left set) while the storage still comes from the current context. Said as a warning: the run would land
        in one place's storage and run on another's cluster."""
        address, storage = self.source("address"), self.source("storage")
        if not (address.startswith("env ") and storage.startswith("current context ")):
            return None
        return (f"the address comes from the environment ({address}) but the storage from the {storage}: "
                "--context NAME applies a whole context, `unset` the variable to use the current one")

    def set(self, key: str, value: Any, source: str) -> None:
        if not isinstance(value, Deferred):
            _protect(key, value)
        if key == "queues" and isinstance(value, dict) and isinstance(self.get("queues"), dict):
            value = {**self.get("queues"), **value}  # by name: a later layer's [queues.NAME] replaces that one whole
            source = f"{self.source('queues')}; {source}"
        self.values[key] = Setting(value, source)
