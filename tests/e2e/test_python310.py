"""The client on Python 3.10 (requires-python >=3.10): the wheel built from this checkout, installed with its base
dependencies (no extras) into a 3.10 virtualenv, runs `--help`, `validate`, `render` and `jobs` in this repository.
No cluster. Skipped only where no Python 3.10 is installed.

The virtualenv with the dependencies is cached under ~/.cache/rtjob-tests, keyed by the interpreter and the
dependency list (pyproject.toml), so later runs only reinstall rtjob itself (seconds) and work offline; the first
run installs the dependencies with pip (about a minute).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.cli import base_env, record
from support.py310 import dependency_venv, pip, python310
from support.tool_venv import source_copy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def client310(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = python310()
    if python is None:
        pytest.skip("Python 3.10 is not installed (no python3.10 on PATH or under pyenv): the 3.10 client check "
                    "needs one")
    venv = dependency_venv(python)
    # This checkout's source (not its build outputs), built and installed as a user would: not editable.
    source = source_copy(tmp_path_factory.mktemp("src"))
    pip(venv, "install", "--no-deps", "--no-build-isolation", "--force-reinstall", str(source))
    pip(venv, "check")  # every base dependency (and marker, e.g. tomli before 3.11) is satisfied
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
