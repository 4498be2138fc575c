"""Run a CLI with its stdout on a pseudo-terminal and hand each chunk of output to the caller as it arrives.

A pty, not a pipe: on a terminal Python line-buffers stdout, so no CLI is held back by a pipe's block
buffering that a user at a terminal would never see. Shared by the log-latency (run.py, loglat_bench.py) and
cold-start (coldstart_bench.py) measurements.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO


def read_pty(cmd: list[str], env: dict[str, str], on_chunk: Callable[[bytes], None], timeout: float, *,
             cwd: Path | None = None, stderr: IO[bytes] | int = subprocess.DEVNULL,
             wait_s: float = 30) -> tuple[int | None, bool]:
    """Run ``cmd`` until its output ends (it exited) or ``timeout`` passes, calling ``on_chunk`` with every read.
    Returns (its exit code, None if it had to be killed; whether the timeout passed first)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=stderr)
    os.close(slave)
    deadline = time.monotonic() + timeout
    timed_out = True
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    timed_out = False
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the CLI exited and its side of the pty is closed
                chunk = b""
            if not chunk:
                timed_out = False
                break
            on_chunk(chunk)
        code = None if timed_out else proc.wait(timeout=wait_s)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return code, timed_out
