"""The client on Python 3.10 (requires-python >=3.10): the wheel built from this checkout, installed with its base
dependencies (no extras) into a 3.10 virtualenv, runs `--help`, `validate`, `render` and `jobs` in this repository.
No cluster. Skipped only where no Python 3.10 is installed.

The virtualenv with the dependencies is cached under ~/.cache/rtjob-tests, keyed by the interpreter and the
dependency list (pyproject.toml), so later runs only reinstall rtjob itself (seconds) and work offline; the first
run installs the dependencies with pip (about a minute).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
from support.cli import base_env, record
from support.tool_venv import source_copy

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def _python310() -> str | None:
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


def _pip(venv: Path, *args: str, timeout: float = 600) -> None:
    proc = subprocess.run([str(venv / "bin/python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


def _dependency_venv(python: str) -> Path:
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
            _pip(venv, "install", *deps, *build)  # build: rtjob is built without isolation
            (venv / ".complete").touch()
    return venv


@pytest.fixture(scope="module")
def client310(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = _python310()
    if python is None:
        pytest.skip("Python 3.10 is not installed (no python3.10 on PATH or under pyenv): the 3.10 client check "
                    "needs one")
    venv = _dependency_venv(python)
    # This checkout's source (not its build outputs), built and installed as a user would: not editable.
    source = source_copy(tmp_path_factory.mktemp("src"))
    _pip(venv, "install", "--no-deps", "--no-build-isolation", "--force-reinstall", str(source))
    _pip(venv, "check")  # every base dependency (and marker, e.g. tomli before 3.11) is satisfied
    return venv


def _env(home: Path) -> dict[str, str]:
    env = base_env(home)
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "RTJOB_PROJECT"):
        env.pop(name, None)  # the installed wheel, not this checkout's source
    return env


def _rtjob(venv: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(venv / "bin/rtjob"), *args], cwd=REPO, env=_env(home), capture_output=True,
                          text=True, timeout=120)
    record(proc.stdout, proc.stderr)
    return proc


def test_the_base_client_works_on_python_310(client310: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    where = subprocess.run([str(client310 / "bin/python"), "-c", "import sys, rtjob; print(sys.version_info[:2], "
                            "rtjob.__file__)"], env=_env(home), capture_output=True, text=True, timeout=60,
                           cwd=tmp_path)
    assert where.stdout.startswith("(3, 10) ") and "site-packages" in where.stdout, where.stdout + where.stderr
    help_ = _rtjob(client310, home, "--help")
    assert help_.returncode == 0 and "rtjob render ddp-resnet" in help_.stdout, help_.stderr
    validate = _rtjob(client310, home, "validate")
    assert validate.returncode == 0 and "jobs/ddp-resnet.yaml" in validate.stdout, validate.stderr
    render = _rtjob(client310, home, "render", "ddp-resnet", "-o", "json", "--submission-id", "py310-1")
    assert render.returncode == 0, render.stderr
    rendered = json.loads(render.stdout)
    assert rendered["run"]["id"] == "py310-1" and "training.ray_ddp" in rendered["submit_job"]["entrypoint"]
    jobs = _rtjob(client310, home, "jobs")
    assert jobs.returncode == 0 and "ddp-resnet" in jobs.stdout and "hello" in jobs.stdout, jobs.stderr
    for proc in (help_, validate, render, jobs):
        assert "Traceback" not in proc.stderr
