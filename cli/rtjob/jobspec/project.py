"""Where the project is, which jobs and compute configs it has, and its settings.

Settings come from the current context (jobspec/contexts.py), the project config (``rtjob.toml``, else
``[tool.rtjob]`` in pyproject.toml), environment variables, an explicitly chosen context, then flags (each
overrides the one before); every value remembers its source for ``render --explain`` (jobspec/settings.py).
Which backend names exist is the backend registry's knowledge (``rtjob.backends.configured``).

Two ways to find the project: a job given by name belongs to the current project (found from the current
folder, ``find_root``); a job given by path belongs to the project that contains the file (``job_file_root``),
wherever rtjob is run from.
"""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from .settings import BOOLEAN_KEYS, ENV_NAMES, Settings, tomllib

# The project config file of a project without a pyproject.toml (same keys as [tool.rtjob], top level).
PROJECT_FILE = "rtjob.toml"
# Where `rtjob pull` puts runs by default (under the current folder); never uploaded with a working dir.
PULLED_RUNS_DIR = "rtjob-runs"


def _has_tool_table(folder: Path) -> bool:
    pyproject = folder / "pyproject.toml"
    return pyproject.is_file() and "[tool.rtjob]" in pyproject.read_text(encoding="utf-8", errors="ignore")


def find_root(start: Path | None = None) -> Path:
    """The current project: $RTJOB_PROJECT, else the nearest folder up with jobs/, rtjob.toml or [tool.rtjob]."""
    env = os.environ.get("RTJOB_PROJECT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "jobs").is_dir() or (folder / PROJECT_FILE).is_file() or _has_tool_table(folder):
            return folder
    return here


def job_file_root(job_file: Path) -> Path:
    """The project a job file belongs to: the nearest folder up from the file with rtjob.toml, [tool.rtjob]
    or .git, or whose jobs/ holds the file; never the home folder or /: then the file's own folder."""
    folder = job_file.resolve().parent
    stops = {Path.home().resolve(), Path(folder.anchor)}
    below: Path | None = None  # the folder the walk came from
    for candidate in (folder, *folder.parents):
        if candidate in stops:
            break
        if ((below is not None and below.name == "jobs") or (candidate / PROJECT_FILE).is_file()
                or _has_tool_table(candidate) or (candidate / ".git").exists()):
            return candidate
        below = candidate
    return folder


def project_of(job_ref: str) -> Path:
    """The project a job reference belongs to: the file's own project for a path, else the current one."""
    if _is_path(job_ref):
        return job_file_root(Path(job_ref)) if Path(job_ref).is_file() else find_root()
    return find_root()


def rtjob_home() -> Path:
    """Where rtjob keeps its own state (the embedded cluster, its token, local storage)."""
    return Path(os.environ.get("RTJOB_HOME") or Path.home() / ".rtjob")


def project_config_file(root: Path) -> Path:
    """The file the project's settings come from: rtjob.toml if the project has one, else pyproject.toml."""
    own = root / PROJECT_FILE
    return own if own.is_file() else root / "pyproject.toml"


def project_config_source(root: Path) -> str:
    """How ``render --explain`` names the project config."""
    path = project_config_file(root)
    return str(path) if path.name == PROJECT_FILE else f"{path} [tool.rtjob]"


def _read_tool_table(root: Path) -> dict[str, Any]:
    """The project's settings: the top level of rtjob.toml, else [tool.rtjob] in pyproject.toml."""
    path = project_config_file(root)
    if not path.is_file():
        return {}
    own = path.name == PROJECT_FILE
    table_name = "the settings" if own else "[tool.rtjob]"
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{path}: cannot read {table_name}: {exc}") from None
    table = data if own else data.get("tool", {}).get("rtjob", {})
    from .contexts import check_settings  # the same checks as a context's, less references (not in a project)
    from .queues import toml_locator  # a key's file:line

    return check_settings(str(path) if own else f"{path}: [tool.rtjob]", table, references=False,
                          at=toml_locator(str(path), text, () if own else ("tool", "rtjob")))


def _env_value(key: str, raw: str) -> Any:
    if key in BOOLEAN_KEYS:
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


def load_settings(flags: dict[str, Any], root: Path | None = None, context: str | None = None) -> Settings:
    """Lowest first: defaults, the current context, [tool.rtjob], environment, the chosen context (``context``,
    else $RTJOB_CONTEXT), flags."""
    from .contexts import context_layers

    root = root or find_root()
    settings = Settings(root=root)
    settings.set("verify_tls", True, "default")
    settings.set("storage_check", True, "default")
    chosen, current = context_layers(context)
    for key, value, source in current:
        settings.set(key, value, source)
    for key, value in _read_tool_table(root).items():
        settings.set(key, value, project_config_source(root))
    for key, names in ENV_NAMES.items():
        for name in names:
            raw = os.environ.get(name)
            if raw:
                settings.set(key, _env_value(key, raw), f"env {name}")
                break
    for key, value, source in chosen:  # above the environment: a stray RAY_ADDRESS never beats --context
        settings.set(key, value, source)
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


def job_file_of(name: str, root: Path) -> Path:
    """The file of one of ``job_names(root)``: jobs/NAME.yaml (or .yml)."""
    found = _named(root / "jobs", name, root)
    if found is None:
        raise BadInput(f"unknown job {name!r} (no jobs/{name}.yaml in {root})")
    return found[0]


def _did_you_mean(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _declared_name(path: Path) -> str | None:
    """The `name:` a job file declares (None if it cannot be read: the file's own load reports that)."""
    from .yamlsrc import load_yaml

    try:
        data = load_yaml(path).data
    except BadInput:
        return None
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) else None


@functools.lru_cache(maxsize=8)
def _declared_names(files: tuple[tuple[Path, int, int], ...]) -> dict[Path, str | None]:
    # Keyed by (file, mtime, size): `validate` looks up every job, and each lookup reads every file.
    return {path: _declared_name(path) for path, _, _ in files}


def _jobs_named(jobs: Path, name: str) -> list[Path]:
    """Job files in ``jobs`` whose `name:` is ``name`` (only files that mention it are parsed)."""
    if not jobs.is_dir():
        return []
    files = sorted(p for p in jobs.iterdir() if p.suffix in {".yaml", ".yml"} and p.is_file()
                   and name in p.read_text(encoding="utf-8", errors="ignore"))
    stats = tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return [path for path, declared in _declared_names(stats).items() if declared == name]


def find_job_file(name_or_path: str, root: Path) -> tuple[Path, str]:
    """A path, or a job name: jobs/NAME.yaml or the file in jobs/ whose `name:` is NAME → (file, how to show it).

    A path is shown relative to the current folder when it is under it (as typed), else relative to the
    project ``root`` when it is under that, else in full."""
    if _is_path(name_or_path):
        candidate = Path(name_or_path)
        if not candidate.is_file():
            raise BadInput(f"{name_or_path}: no such job file")
        cwd = Path.cwd().resolve()
        inside_cwd = candidate.resolve().is_relative_to(cwd)
        return candidate, _display(candidate, cwd if inside_cwd else root)
    by_file = _named(root / "jobs", name_or_path, root)
    found: dict[Path, str] = {by_file[0].resolve(): f"{by_file[1]} (file name)"} if by_file else {}
    for path in _jobs_named(root / "jobs", name_or_path):
        found.setdefault(path.resolve(), f"{_display(path, root)} (name: {name_or_path})")
    if len(found) > 1:
        raise BadInput(f"job {name_or_path!r} is ambiguous: {' and '.join(found.values())}; "
                       "give the file's path or rename one")
    if found:
        path = next(iter(found))
        return path, _display(path, root)
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
