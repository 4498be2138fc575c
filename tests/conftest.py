"""Shared fixtures: the real rtjob CLI as a subprocess, and one real embedded Ray cluster per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RTJOB = [sys.executable, "-m", "rtjob.main"]
# Variables that would point rtjob or Ray somewhere else than the test's own cluster.
_SCRUB = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RTJOB_ADDRESS", "RTJOB_BACKEND", "RTJOB_STORAGE",
          "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_JOB_HEADERS", "RTJOB_PROJECT")


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["RTJOB_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def rtjob(*args: str, env: dict[str, str], timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RTJOB, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def popen_rtjob(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.Popen[str]:
    return subprocess.Popen([*RTJOB, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, bufsize=1)


def new_id(prefix: str) -> str:
    return f"t-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def cluster_env() -> Iterator[dict[str, str]]:
    """A real 2-node embedded Ray cluster (token auth on) in a private RTJOB_HOME; stopped at the end."""
    home = Path(tempfile.mkdtemp(prefix="rtjob-t-", dir="/tmp"))
    env = base_env(home)
    try:
        up = rtjob("local", "up", "--nodes", "2", env=env, timeout=240)
        assert up.returncode == 0, up.stderr
        yield env
    finally:
        rtjob("local", "down", env=env, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


def wait_for_status(env: dict[str, str], run_id: str, wanted: set[str], timeout: float = 60) -> str:
    import json

    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        proc = rtjob("status", run_id, "--output", "json", env=env, timeout=30)
        if proc.returncode == 0:
            status = json.loads(proc.stdout)["status"]
            if status in wanted:
                return status
        time.sleep(0.5)
    raise AssertionError(f"{run_id} never reached {wanted} (last: {status})")
