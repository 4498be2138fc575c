"""The run's companion: ``python -m rtjob.runside.companion ENTRYPOINT`` is the entrypoint rtjob gives Ray.

It runs the job's own entrypoint as its child (runside/child.py: as Ray would, with the job's time limit) and,
while the run goes and at its end, writes the run's story to the run's storage from where the run is, so nothing
depends on a client that watches: the log as parts (logparts.py), the script's ``RTJOB_RUN_DIR`` synced to
``RTJOB_RUN_URI`` (sync.py), the record's start, heartbeat (``last_seen``) and end (outcome.py), and the
notification of the outcome. Then it exits as the entrypoint did, so Ray's ``driver_exit_code`` is what it would
be without it.

A companion error never changes the script's exit code or stops it: it is one line in the driver log. With
``RTJOB_COMPANION=0`` in the job's environment the entrypoint runs bare (exec'd, nothing else).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import resource
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import rtjob_contract as contract

from ..core.redact import secret_arg_values, secret_values
from .child import Child, Ended
from .outcome import RAY_JOB_CONFIG, job_metadata

if TYPE_CHECKING:
    from ..storage.objects import Objects
    from .logparts import LogParts
    from .outcome import Outcome
    from .sync import DirSync

SUBMISSION_ID_KEY = "job_submission_id"  # Ray's own metadata key: the attempt's submission id
INTERVAL_S = float(os.environ.get(contract.ENV_COMPANION_INTERVAL_S) or 5)  # log parts and the folder's sync
HEARTBEAT_S = float(os.environ.get(contract.ENV_COMPANION_HEARTBEAT_S) or 30)  # the record's last_seen


def say(text: str) -> None:
    """One line in the driver log (the companion's only output)."""
    with contextlib.suppress(OSError):
        sys.stderr.write(f"rtjob companion: {text}\n")
        sys.stderr.flush()


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def attempt_id(env: Mapping[str, str]) -> str | None:
    """This attempt's submission id (a retry's is ``<id>-retryN``), from Ray's job config; else the run's name."""
    metadata = job_metadata(env)
    if metadata.get(SUBMISSION_ID_KEY):
        return str(metadata[SUBMISSION_ID_KEY])
    return env.get(contract.ENV_RUN_NAME)


def local_run_dir(run_uri: str, run_id: str) -> str | None:
    """Where the script's ``RTJOB_RUN_DIR`` is on this node: the run's folder itself when it is a local path,
    else a folder of the node that the companion syncs to the run's storage."""
    if "://" not in run_uri:
        return None
    return os.path.join(tempfile.gettempdir(), "rtjob-run-dirs", run_id)


def child_env(env: Mapping[str, str], run_dir: str | None) -> dict[str, str]:
    """The entrypoint's environment: the job's, with ``RTJOB_RUN_DIR`` the local folder (also in the runtime_env
    Ray gives the driver's workers, so Ray tasks on this node write there too)."""
    out = dict(env)
    if run_dir is None:
        return out
    out[contract.ENV_RUN_DIR] = run_dir
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        config = json.loads(out.get(RAY_JOB_CONFIG) or "")
        runtime_env = config.setdefault("runtime_env", {}) or {}
        runtime_env.setdefault("env_vars", {})[contract.ENV_RUN_DIR] = run_dir
        config["runtime_env"] = runtime_env
        out[RAY_JOB_CONFIG] = json.dumps(config)
    return out


def log_source() -> str | None:
    """The file Ray writes the driver's output to (the companion's stdout), None when it is not a file."""
    with contextlib.suppress(OSError):
        path = os.readlink("/proc/self/fd/1")
        if os.path.isfile(path):
            return path
    return None


class Companion:
    def __init__(self, entrypoint: str, env: Mapping[str, str]) -> None:
        self.entrypoint = entrypoint
        self.env = env
        self.run_uri = env.get(contract.ENV_RUN_URI) or None
        self.run_id = env.get(contract.ENV_RUN_NAME) or "run"
        self.attempt = attempt_id(env) or self.run_id
        self.secrets = secret_values(env) + secret_arg_values(entrypoint)
        self.terminated = False  # SIGTERM reached the companion (Ray's stop, a node shutting down)
        self.objects: Objects | None = None
        self.parts: LogParts | None = None
        self.sync: DirSync | None = None
        self.outcome: Outcome | None = None
        limit = env.get(contract.ENV_TIME_LIMIT_S)
        self.time_limit = float(limit) if limit and limit.replace(".", "", 1).isdigit() else None

    def _on_term(self, signum: int, _frame: object) -> None:
        self.terminated = True  # the child got it too (Ray signals the whole tree): its end is awaited

    def run(self) -> Ended:
        started = now_iso()
        signal.signal(signal.SIGTERM, self._on_term)
        run_dir = local_run_dir(self.run_uri, self.run_id) if self.run_uri else None
        if run_dir:
            with contextlib.suppress(OSError):
                os.makedirs(run_dir, exist_ok=True)
        source = log_source()
        log_start = os.path.getsize(source) if source else 0  # what Ray wrote before the entrypoint's first line
        child = Child(self.entrypoint, child_env(self.env, run_dir), self.time_limit)
        self._guard("starting", lambda: self._start(started, run_dir, source, log_start))
        next_flush = next_beat = time.monotonic()
        while True:
            ended = child.poll()
            if ended is not None:
                break
            moment = time.monotonic()
            if moment >= next_flush:
                self._guard("the log and the run's folder", self._flush)
                next_flush = moment + INTERVAL_S
            if moment >= next_beat:
                if self.outcome is not None:
                    self._guard("the heartbeat", self.outcome.heartbeat)
                next_beat = moment + HEARTBEAT_S
            time.sleep(0.2)
        self._guard("the run's end", lambda: self._end(ended))
        return ended

    def _start(self, started: str, run_dir: str | None, source: str | None, log_start: int) -> None:
        if not self.run_uri:
            return
        from ..storage.opening import objects_for
        from .logparts import LogParts
        from .outcome import Outcome

        self.objects = objects = objects_for(self.run_uri)
        self.outcome = outcome = Outcome(self.run_uri, self.run_id, self.env, objects, say)
        outcome.started(started)
        if source is None:
            say("stdout is not a file: the log is not written to the run's storage (rtjob archives it when it "
                "sees the run end)")
        else:
            self.parts = LogParts(source, objects, self.attempt, self.secrets, say, on_text=outcome.saw_text)
            outcome.log_from(log_start)
        if run_dir:
            from .sync import DirSync

            self.sync = DirSync(run_dir, objects, say=say)

    def _flush(self, final: bool = False) -> None:
        if self.parts is not None:
            self.parts.flush(final=final)
        if self.sync is not None:
            self.sync.scan(final=final)

    def _end(self, ended: Ended) -> None:
        if self.outcome is None:
            return
        self._guard("the last log part and files", lambda: self._flush(final=True))
        whole = self.parts.write_whole() if self.parts is not None else False
        logs = ([f"{contract.RUN_LOGS_DIR}/{contract.DRIVER_LOG_FILE}"] if whole else [])
        usage = resource.getrusage(resource.RUSAGE_SELF)  # the companion's own CPU, not the entrypoint's
        self.outcome.ended(ended, self.terminated, self.time_limit, logs, self.secrets,
                           round(usage.ru_utime + usage.ru_stime, 3))
        if self.parts is not None:
            self.parts.close()

    def _guard(self, what: str, call: object) -> None:
        """A companion step: an error is one line in the driver log, never the run's end."""
        try:
            call()  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - the script's outcome must not depend on rtjob's
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            from ..core.redact import redact

            say(f"{what}: {redact(str(message), self.secrets)}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if len(args) != 1:
        say("usage: python -m rtjob.runside.companion ENTRYPOINT (one argument, as Ray's shell gets it)")
        os._exit(2)
    entrypoint = args[0]
    if os.environ.get(contract.ENV_COMPANION) == "0":
        os.execv("/bin/sh", ["/bin/sh", "-c", entrypoint])
    ended = Companion(entrypoint, os.environ).run()
    sys.stdout.flush()
    sys.stderr.flush()
    ended.exit()


if __name__ == "__main__":
    main()
