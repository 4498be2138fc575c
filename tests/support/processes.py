"""Processes a test (or a benchmark through tests/support) started: ended by their own handle, or found by a marker
variable in their environment (each one a start spawned inherits it) and ended by pid; free ports for them. Stdlib
only."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any


def stop(proc: subprocess.Popen[Any], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``grace`` seconds; reaped either way (no zombie)."""
    proc.terminate()  # nothing is sent to a process already reaped
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on loopback: the sockets stay bound until all are chosen, so none repeats."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def marked_pids(name: str, value: str) -> list[int]:
    """PIDs whose environment carries ``name=value``, read raw from /proc (this process excluded)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def children_of(pids: list[int]) -> list[int]:
    """``pids`` and every descendant of them (from /proc's parent ids), this process excluded."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
    found, added = set(pids), True
    while added:
        more = {pid for pid, ppid in parent.items() if ppid in found} - found
        found |= more
        added = bool(more)
    return sorted(found - {os.getpid()})


def is_zombie(pid: int) -> bool:
    """Ended (gone, or a zombie its parent has not reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"
    except (OSError, IndexError):
        return True


def end_pids(pids: list[int], term_grace: float = 8.0, kill_grace: float = 2.0) -> None:
    """SIGTERM, up to ``term_grace`` seconds for them to end, then SIGKILL to what is left: only ``pids``."""
    for sig, grace in ((signal.SIGTERM, term_grace), (signal.SIGKILL, kill_grace)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(not is_zombie(p) for p in pids):
            time.sleep(0.1)
