"""Shared fixtures: one real embedded Ray cluster per session (helpers live in tests/support/)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import base_env, rtjob


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
