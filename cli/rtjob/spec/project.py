"""Where the project is, which jobs and compute configs it has, and its settings.

Settings come from ``[tool.rtjob]`` in the project's pyproject.toml, then environment variables, then
flags (each overrides the one before); every value remembers its source for ``render --explain``.
Which backend names exist is the backend registry's knowledge (``rtjob.backends.configured``).
"""

from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SETTING_KEYS = ("backend", "address", "storage", "compute_config", "headers", "verify_tls", "cloud")
# Environment variables per setting, first match wins (rtjob's own first, then Ray's).
ENV_NAMES: dict[str, tuple[str, ...]] = {
    "backend": ("RTJOB_BACKEND",),
    "address": ("RTJOB_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"),
    "storage": ("RTJOB_STORAGE",),
    "compute_config": ("RTJOB_COMPUTE_CONFIG",),
    "headers": ("RAY_JOB_HEADERS",),
    "verify_tls": ("RTJOB_VERIFY_TLS",),
    "cloud": ("RTJOB_CLOUD",),  # the Anyscale cloud of a job whose job file and compute config name none
}


@dataclass
class Setting:
    value: Any
    source: str


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

    def set(self, key: str, value: Any, source: str) -> None:
        self.values[key] = Setting(value, source)


def find_root(start: Path | None = None) -> Path:
    """The project root: $RTJOB_PROJECT, else the nearest folder up with jobs/ or [tool.rtjob]."""
    env = os.environ.get("RTJOB_PROJECT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "jobs").is_dir():
            return folder
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "[tool.rtjob]" in pyproject.read_text(encoding="utf-8", errors="ignore"):
            return folder
    return here


def rtjob_home() -> Path:
    """Where rtjob keeps its own state (the embedded cluster, its token, local storage)."""
    return Path(os.environ.get("RTJOB_HOME") or Path.home() / ".rtjob")


def _read_tool_table(root: Path) -> dict[str, Any]:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{pyproject}: cannot read [tool.rtjob]: {exc}") from None
    table = data.get("tool", {}).get("rtjob", {})
    if not isinstance(table, dict):
        raise BadInput(f"{pyproject}: [tool.rtjob] must be a table")
    for key in table:
        if key not in SETTING_KEYS:
            close = difflib.get_close_matches(key, SETTING_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(SETTING_KEYS)}"
            raise BadInput(f"{pyproject}: [tool.rtjob] unknown key {key!r}{hint}")
    return table


def _env_value(key: str, raw: str) -> Any:
    if key == "verify_tls":
        return raw.strip().lower() not in {"0", "false", "no", "off"}
    if key == "headers":
        import json

        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise BadInput("RAY_JOB_HEADERS: not a JSON object, e.g. '{\"X-Team\": \"ml\"}'") from None
        if not isinstance(value, dict):
            raise BadInput("RAY_JOB_HEADERS: must be a JSON object of header names to values")
        from .overrides import parse_headers  # the same checks as --header (names, no control characters)

        return parse_headers([f"{k}: {v}" for k, v in value.items()], source="RAY_JOB_HEADERS")
    return raw


def load_settings(flags: dict[str, Any], root: Path | None = None) -> Settings:
    root = root or find_root()
    settings = Settings(root=root)
    settings.set("verify_tls", True, "default")
    for key, value in _read_tool_table(root).items():
        settings.set(key, value, f"{root / 'pyproject.toml'} [tool.rtjob]")
    for key, names in ENV_NAMES.items():
        for name in names:
            raw = os.environ.get(name)
            if raw:
                settings.set(key, _env_value(key, raw), f"env {name}")
                break
    for key, value in flags.items():
        if value is not None and value != {} and value != ():
            settings.set(key, value, f"flag --{key.replace('_', '-')}")
    return settings  # the backend's name is checked and defaulted by the backend registry (backends.configured)


def _yaml_names(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.iterdir() if p.suffix in {".yaml", ".yml"})


def job_names(root: Path) -> list[str]:
    return _yaml_names(root / "jobs")


# Compute configs shipped with rtjob (package data), one per catalog instance type; a project's own
# compute_configs/NAME.yaml of the same name wins.
BUILTIN_COMPUTE_CONFIGS = Path(__file__).parent / "builtin_compute_configs"


def compute_config_names(root: Path, include_builtin: bool = False) -> list[str]:
    """The project's own compute configs (compute_configs/*.yaml), and the built-in ones if asked."""
    own = _yaml_names(root / "compute_configs")
    return sorted({*own, *_yaml_names(BUILTIN_COMPUTE_CONFIGS)}) if include_builtin else own


def builtin_compute_config_names() -> list[str]:
    return _yaml_names(BUILTIN_COMPUTE_CONFIGS)


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def _is_path(ref: str) -> bool:
    return Path(ref).suffix in {".yaml", ".yml"} or os.sep in ref


def _named(folder: Path, name: str, root: Path) -> tuple[Path, str] | None:
    """folder/NAME.yaml (or .yml), if it exists: (file, how to show it)."""
    for suffix in (".yaml", ".yml"):
        path = folder / f"{name}{suffix}"
        if path.is_file():
            return path, _display(path, root)
    return None


def _did_you_mean(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def find_job_file(name_or_path: str, root: Path) -> tuple[Path, str]:
    """A job name (jobs/NAME.yaml) or a path → (file, how to show it)."""
    if _is_path(name_or_path):
        candidate = Path(name_or_path)
        if not candidate.is_file():
            raise BadInput(f"{name_or_path}: no such job file")
        return candidate, _display(candidate, root)
    found = _named(root / "jobs", name_or_path, root)
    if found:
        return found
    names = job_names(root)
    known = f" (jobs in {root / 'jobs'}: {', '.join(names)})" if names else f" (no jobs/ folder in {root})"
    raise BadInput(f"unknown job {name_or_path!r}{_did_you_mean(name_or_path, names)}{known}")


BUILTIN_SHOWN = "<built-in>"  # how a built-in compute config's file is shown (its folder is inside rtjob)


def find_compute_config_file(name_or_path: str, root: Path, referrer: str = "") -> tuple[Path, str]:
    """A compute config name (the project's compute_configs/NAME.yaml, else a built-in) or a path (relative to
    the project) → (file, shown)."""
    if _is_path(name_or_path):
        candidate = Path(name_or_path)
        if not candidate.is_absolute():
            candidate = root / candidate
        if not candidate.is_file():
            raise BadInput(f"{referrer}compute config {name_or_path!r}: no such file")
        return candidate, _display(candidate, root)
    found = _named(root / "compute_configs", name_or_path, root)
    if found:
        return found
    builtin = _named(BUILTIN_COMPUTE_CONFIGS, name_or_path, root)
    if builtin:
        return builtin[0], f"{BUILTIN_SHOWN}/{builtin[0].name}"
    names = compute_config_names(root, include_builtin=True)
    raise BadInput(f"{referrer}unknown compute config {name_or_path!r}{_did_you_mean(name_or_path, names)} "
                   f"(available: {', '.join(names) or 'none'})")
