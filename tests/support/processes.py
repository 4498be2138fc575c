"""Ending a subprocess a test (or a benchmark through tests/support) started, by its own handle. Stdlib only."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(proc: subprocess.Popen[Any], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``grace`` seconds; reaped either way (no zombie)."""
    proc.terminate()  # nothing is sent to a process already reaped
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
