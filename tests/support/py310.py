"""A Python 3.10 interpreter and a cached 3.10 virtualenv with rtjob's base dependencies, for
tests/e2e/test_python310.py. tests/conftest.py starts ``prepare`` in the background when that test is collected,
so the first run's pip install (about a minute) overlaps the tests before it; the test then finds it done (the
file lock makes the two callers one)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from filelock import FileLock

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def python310() -> str | None:
    """A working Python 3.10 with venv support: on PATH, or installed by pyenv (whose shim may not select it)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which("python3.10"), *sorted(glob.glob(str(pyenv / "versions/3.10*/bin/python3.10"))),
                  "/usr/bin/python3.10", "/usr/local/bin/python3.10"]
    for exe in filter(None, candidates):
        try:
            probe = subprocess.run([exe, "-c", "import sys, venv, ensurepip; print(sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 10)":
            return exe
    return None


def pip(venv: Path, *args: str, timeout: float = 600) -> None:
    proc = subprocess.run([str(venv / "bin/python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


def dependency_venv(python: str) -> Path:
    """A 3.10 virtualenv holding the base dependencies (cached: keyed by the interpreter and the list)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    deps, build = pyproject["project"]["dependencies"], pyproject["build-system"]["requires"]
    key = hashlib.sha256(json.dumps([os.path.realpath(python), deps, build]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rtjob-tests"
    cache.mkdir(parents=True, exist_ok=True)
    venv = cache / f"py310-{key}"
    with FileLock(str(cache / f"py310-{key}.lock")):
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
            pip(venv, "install", *deps, *build)  # build: rtjob is built without isolation
            (venv / ".complete").touch()
    return venv


def prepare() -> None:
    """dependency_venv in a daemon thread (nothing to do without a Python 3.10; a failure shows in the test)."""

    def run() -> None:
        python = python310()
        if python is not None:
            # A failure here shows when the test's own call repeats it.
            with contextlib.suppress(AssertionError, OSError, subprocess.SubprocessError):
                dependency_venv(python)

    global _PREPARING
    _PREPARING = threading.Thread(target=run, name="py310-venv", daemon=True)
    _PREPARING.start()


_PREPARING: threading.Thread | None = None


def finish() -> None:
    """Wait for a background ``prepare`` (a session that ended early must not leave its pip running)."""
    if _PREPARING is not None:
        _PREPARING.join(timeout=900)
