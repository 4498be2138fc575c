"""The entrypoint as the companion's child: started as Ray would start it, its time limit enforced, its end told
as the exit code Ray would have seen without the companion.

Ray runs an entrypoint with ``/bin/sh -c`` in a new session and reports the process's return code as
``driver_exit_code``: N for ``exit N``, -9/-15 when a signal killed it (the shell execs a simple command). The
companion runs the entrypoint the same way, in the same process group (Ray's stop and the watcher that kills the
group when the job's supervisor dies reach it as before), and at its end exits the same way: ``exit N``, or the
same signal raised on itself. A time limit ends it as coreutils' ``timeout -k 30`` did: TERM to the group at the
limit (124), KILL 30 s later (137)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO

KILL_AFTER_S = 30  # after the time limit's TERM, as `timeout -k 30` did
TIMED_OUT = 124  # coreutils timeout's codes: ended after TERM, or KILLed after -k
KILLED_AFTER_TIMEOUT = 128 + int(signal.SIGKILL)
RELAY_DRAIN_S = 5


def _relay(source: IO[bytes] | None, mask: Callable[[str], str]) -> None:
    """Each line of ``source`` (a line ends at a newline or a carriage return: progress bars) masked, to fd 1."""
    if source is None:
        return
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    pending = b""
    while True:
        chunk = source.read1(65536) if hasattr(source, "read1") else source.read(65536)
        if not chunk:
            break
        pending += chunk
        cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
        if cut < 0 and len(pending) < 1 << 20:
            continue
        done, pending = (pending[:cut + 1], pending[cut + 1:]) if cut >= 0 else (pending, b"")
        with contextlib.suppress(OSError):
            out.write(mask(done.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
    with contextlib.suppress(OSError):
        if pending:
            out.write(mask(pending.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
        out.close()


@dataclass
class ChildExit:
    """How the entrypoint ended: ``code`` as Ray reports it (negative: the signal that killed it)."""

    code: int
    timed_out: bool = False
    reason: str | None = None  # why it failed when the entrypoint never started (a secret not resolved)

    @property
    def signal_name(self) -> str | None:
        if self.code < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-self.code).name
        return None

    def exit(self) -> None:
        """Leave the companion's process as the entrypoint left: the same code, or the same signal."""
        if self.code < 0:
            sig = -self.code
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
                os.kill(os.getpid(), sig)
                time.sleep(5)  # the signal is delivered before this ends
            os._exit(128 + sig)
        os._exit(self.code & 0xFF)


class Child:
    """The entrypoint's process (``/bin/sh -c ENTRYPOINT``), with ``env``."""

    def __init__(self, entrypoint: str, env: Mapping[str, str], time_limit_s: float | None = None,
                 kill_after_s: float = KILL_AFTER_S, relay: Callable[[str], str] | None = None) -> None:
        self.entrypoint = entrypoint
        self.time_limit_s = time_limit_s
        self.kill_after_s = kill_after_s
        self.started = time.monotonic()
        # relay: the entrypoint's output (stdout and stderr, as Ray's driver log holds both) through it, line by
        # line, to the companion's stdout, so what Ray keeps is masked too (a run with secrets).
        piped = relay is not None
        self.proc = subprocess.Popen(entrypoint, shell=True, env=dict(env),  # noqa: S602 - Ray's own way
                                     stdout=subprocess.PIPE if piped else None,
                                     stderr=subprocess.STDOUT if piped else None)
        self._relay = threading.Thread(target=_relay, args=(self.proc.stdout, relay), daemon=True) if relay else None
        if self._relay is not None:
            self._relay.start()
        self._term_sent_at: float | None = None
        self._killed = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> ChildExit | None:
        """The end once the entrypoint has ended; enforces the time limit on the way (call it often)."""
        code = self.proc.poll()
        if code is not None:
            if self._relay is not None:
                self._relay.join(RELAY_DRAIN_S)  # its last lines (a process it left holding the pipe: not waited)
            if self._term_sent_at is not None:
                return ChildExit(KILLED_AFTER_TIMEOUT if self._killed else TIMED_OUT, timed_out=True)
            return ChildExit(code)
        now = time.monotonic()
        if self.time_limit_s and self._term_sent_at is None and now - self.started >= self.time_limit_s:
            self._term_sent_at = now
            self._signal_others(signal.SIGTERM)
        elif self._term_sent_at is not None and not self._killed and now - self._term_sent_at >= self.kill_after_s:
            self._killed = True
            self._signal_others(signal.SIGKILL)
        return None

    def wait(self, step_s: float = 0.1) -> ChildExit:
        while True:
            ended = self.poll()
            if ended is not None:
                return ended
            time.sleep(step_s)

    def _signal_others(self, sig: int) -> None:
        """``sig`` to the entrypoint and everything it started, never the companion: its descendants, and, where
        the companion leads its process group (as Ray starts it: a new session), the group's other members (what
        `timeout` signals: also a child that left its parent)."""
        me = os.getpid()
        targets = _descendants(me)
        if os.getpgid(0) == me:
            targets |= _group_members(me)
        targets.discard(me)
        for pid in sorted(targets):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgid) of every process /proc shows."""
    out: list[tuple[int, int, int]] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2:
            out.append((int(name), int(fields[1]), int(fields[2])))
    return out


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for child, parent, _ in _processes():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _group_members(pgid: int) -> set[int]:
    return {pid for pid, _, group in _processes() if group == pgid}
