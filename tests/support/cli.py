"""The real rtjob CLI as a subprocess, in a private RTJOB_HOME, scrubbed of settings that point elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from .scrub import scrubbed_environ

REPO = Path(__file__).resolve().parents[2]
RTJOB = [sys.executable, "-m", "rtjob.main"]


# Suite-wide secret check: every output a test captures from rtjob is recorded here, every secret a test plants
# is registered; tests/conftest.py fails the session (at teardown) if any planted value shows up in any output.
PLANTED: set[str] = set()
CAPTURED: list[str] = []


def plant(value: str) -> str:
    """A secret this test hands to rtjob (env, args, tags, tokens): it must appear in no output of the suite."""
    PLANTED.add(value)
    return value


def record(*texts: str | None) -> None:
    CAPTURED.extend(t for t in texts if t)


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = scrubbed_environ()
    env["RTJOB_HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / "xdg-config")  # the developer's own rtjob contexts never apply
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def rtjob(*args: str, env: dict[str, str], timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*RTJOB, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    record(proc.stdout, proc.stderr)
    return proc


def _as_from_a_terminal() -> None:
    # A test run started in the background of a non-interactive shell (nohup ... &) has SIGINT ignored, and its
    # children inherit that: give rtjob Ctrl-C as a terminal would, so the tests that send it see it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen_rtjob(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.Popen[str]:
    return subprocess.Popen([*RTJOB, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, bufsize=1, preexec_fn=_as_from_a_terminal)


def new_id(prefix: str) -> str:
    return f"t-{prefix}-{uuid.uuid4().hex[:8]}"


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


def in_process(capsys: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """rtjob ARGS through the console script's own main, in this process (pytest's ``capsys`` captures it): the
    exit code, stdout and stderr, recorded for the suite-wide secret check. The redactor starts empty, as in a
    new process."""
    capsys.readouterr()
    code = _main(list(args))
    out, err = capsys.readouterr()
    record(out, err)
    return subprocess.CompletedProcess(list(args), code, out, err)


def main_captured(capsys: Any, *args: str) -> tuple[int, str, str]:
    """rtjob's entry point in this process under pytest's ``capsys``: (exit code, stdout, stderr), the output
    recorded for the suite-wide secret check."""
    import pytest
    from rtjob.commands import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out = capsys.readouterr()
    record(out.out, out.err)
    return int(exit_.value.code or 0), out.out, out.err


def run_in_process(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``rtjob(*args, env=env, cwd=cwd)`` without the subprocess (about a second of interpreter and imports
    each): the console script's own main in this process, with the environment made ``env``, the current folder
    ``cwd`` and stdout/stderr captured for the call only, all restored after. Needs no capsys (module-scoped
    fixtures can use it); one call at a time."""
    import contextlib
    import io

    import pytest

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name in set(os.environ) - set(env):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        code = _main(list(args))
    record(out.getvalue(), err.getvalue())
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _main(args: list[str]) -> int:
    """rtjob's console entry point with ``args``, its exit code returned; the redactor starts empty, as in a
    new process."""
    from rtjob.commands import main
    from rtjob.core.redact import REDACTOR

    REDACTOR.clear()
    try:
        main(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0
