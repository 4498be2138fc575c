"""The run's companion: ``python -m rtjob.runside.companion ENTRYPOINT`` is the entrypoint rtjob gives Ray.

It runs the job's own entrypoint as its child (runside/child.py: as Ray would, with the job's time limit) and,
while the run goes and at its end, writes the run's story to the run's storage from where the run is, so nothing
depends on a client that watches: the log as parts (logparts.py) and each attempt's whole log, the script's
``RTJOB_RUN_DIR`` synced to ``RTJOB_RUN_URI`` (storage/dir_sync.py), the record's start, heartbeat (``last_seen``) and end
(outcome.py), and the notification of the outcome.

With remote storage the script's folders are node folders (node_folder.py, storage/node_dirs.py): made afresh for
each attempt and seeded from what the run has in storage before the entrypoint starts (a retry resumes from the
run's files, never from what an earlier attempt left on the node), a pipeline step's input synced down beside it
(``RTJOB_INPUT_DIR``), marked kept while they hold what storage lacks, and removed only once the run's files and end
are stored (ending.py: the end waits for storage, up to RTJOB_STORAGE_GRACE_S; past it the node keeps them).

Then it exits as the entrypoint did, so Ray's ``driver_exit_code`` is what it would be without it.

A companion error never changes the script's exit code or stops it: it is one line in the driver log. With
``RTJOB_COMPANION=0`` in the job's environment the entrypoint runs bare (exec'd, nothing else).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import rtjob_contract as contract

from ..core.clock import now_iso
from ..core.end_words import COMPANION_PREFIX
from ..core.errors import one_line
from ..core.redact import redact, secret_arg_values, secret_values
from ..core.secret_refs import SEALED_ENV_FILE, SETUP_HOOK, sealed
from ..storage.retrying import patiently
from .child import ChildExit
from .child_env import child_env
from .ending import grace_s, store_the_end
from .node_folder import NodeFolder
from .outcome import job_metadata
from .secret_env import RunSecrets, unseal
from .stages import Stages

if TYPE_CHECKING:
    from ..storage.objects import Objects
    from .live_rows import LiveRows
    from .outcome import Outcome

SUBMISSION_ID_KEY = "job_submission_id"  # Ray's own metadata key: the attempt's submission id
INTERVAL_S = float(os.environ.get(contract.ENV_COMPANION_INTERVAL_S) or 5)  # log parts and the folder's sync
HEARTBEAT_S = float(os.environ.get(contract.ENV_COMPANION_HEARTBEAT_S) or 30)  # the record's last_seen


def say(text: str) -> None:
    """One line in the driver log (the companion's only output)."""
    with contextlib.suppress(OSError):
        sys.stderr.write(f"{COMPANION_PREFIX} {text}\n")
        sys.stderr.flush()


def attempt_id(env: Mapping[str, str]) -> str | None:
    """This attempt's submission id (a retry's is ``<id>-retryN``), from Ray's job config; else the run's name."""
    metadata = job_metadata(env)
    if metadata.get(SUBMISSION_ID_KEY):
        return str(metadata[SUBMISSION_ID_KEY])
    return env.get(contract.ENV_RUN_NAME)


def log_source() -> str | None:
    """The file Ray writes the driver's output to (the companion's stdout), None when it is not a file."""
    with contextlib.suppress(OSError):
        path = os.readlink("/proc/self/fd/1")
        if os.path.isfile(path):
            return path
    return None


class Companion:
    """Sequences the run side's stages around the entrypoint: the node folder (node_folder.py), the record's start
    and heartbeat (outcome.py), the stages that carry the run's data to storage (stages.py), and the end, which
    waits for storage (ending.py)."""

    def __init__(self, entrypoint: str, env: Mapping[str, str]) -> None:
        self.entrypoint = entrypoint
        self.env = env
        self.run_uri = env.get(contract.ENV_RUN_URI) or None
        self.run_id = env.get(contract.ENV_RUN_NAME) or "run"
        self.attempt = attempt_id(env) or self.run_id
        self.secrets = secret_values(env) + secret_arg_values(entrypoint)
        self.terminated = False  # SIGTERM reached the companion (Ray's stop, a node shutting down)
        self.term_while_ending = False  # ... after the entrypoint ended: the cluster is going, stop waiting
        self.ending = False
        self.stages = Stages()
        self.folder: NodeFolder | None = None  # the run's folder on this node (remote storage only)
        self.input_dir: str | None = None  # a pipeline step's RTJOB_INPUT_DIR
        self.input_uri = env.get(contract.ENV_INPUT_URI) or None
        self.outcome: Outcome | None = None
        self.log_file: str | None = None  # the driver log file (the companion's stdout)
        limit = env.get(contract.ENV_TIME_LIMIT_S)
        self.time_limit = float(limit) if limit and limit.replace(".", "", 1).isdigit() else None

    @property
    def run_dir(self) -> str | None:
        return self.folder.run_dir if self.folder is not None else None

    def _on_term(self, signum: int, _frame: object) -> None:
        self.terminated = True  # the child got it too (Ray signals the whole tree): its end is awaited
        self.term_while_ending = self.ending

    def run(self) -> ChildExit:
        started = now_iso()
        signal.signal(signal.SIGTERM, self._on_term)
        self.guard("the node folder", self._node_folders)
        source = log_source()
        log_start = os.path.getsize(source) if source else 0  # what Ray wrote before the entrypoint's first line
        run_secrets = RunSecrets(self.env, say)  # resolved before the log parts start: they mask the values
        self.secrets += list(run_secrets.values.values())
        if run_secrets.values:  # the run side's own parts read them too (a tracker's token, a notify URL)
            self.env = {**self.env, **run_secrets.values}
        self.guard("starting", lambda: self._start(started, source, log_start))
        # the workers read the values it published, or the sealed variables (an Anyscale JobConfig names no hook)
        sealed_vars = _sealed_env()  # forwarded credentials, notify URLs: the redactor knows them (main's unseal)
        hook = SETUP_HOOK if run_secrets.published or sealed_vars else None
        child = run_secrets.start(self.entrypoint, child_env(self.env, self.run_dir, self.input_dir, setup_hook=hook),
                                  self.time_limit, mask=sealed_vars)
        next_flush = next_beat = time.monotonic()
        while True:
            ended = child.poll()
            if ended is not None:
                break
            moment = time.monotonic()
            outcome, log_file = self.outcome, self.log_file
            if outcome is not None and log_file is not None:
                self.guard("the timeline", functools.partial(outcome.watch, log_file))
            if moment >= next_flush:
                self.stages.flush(self.guard)
                self._mark_folder()
                next_flush = moment + INTERVAL_S
            elif self.stages.due(moment):  # new output: up soon, not at the next flush
                self.stages.flush_log(self.guard)
            if moment >= next_beat:
                if outcome is not None:
                    self.guard("the heartbeat", outcome.heartbeat)
                next_beat = moment + HEARTBEAT_S
            time.sleep(0.2)
        self.ending = True
        run_secrets.withdraw()
        self.guard("the run's end", lambda: self._end(ended))
        return ended

    def _node_folders(self) -> None:
        """The run's node folder (remote storage), with ``run/`` and (a step's) ``input/``; a local input folder is
        the step's input itself."""
        if self.input_uri and "://" not in self.input_uri:
            self.input_dir = self.input_uri
        if not self.run_uri or "://" not in self.run_uri:
            return
        remote_input = bool(self.input_uri and "://" in self.input_uri)
        self.folder = NodeFolder.make(self.run_id, remote_input, say)
        self.input_dir = self.folder.input_dir or self.input_dir

    def _mark_folder(self) -> None:
        """The node folder marked kept while it holds files the run's storage lacks (a lost driver's retry then
        moves it aside instead of emptying it), unmarked once storage caught up."""
        folder = self.folder
        if folder is None:
            return
        if self.stages.files_pending and not folder.marked:
            from .ending import marker_of

            self.guard("the kept marker", lambda: folder.mark(marker_of(self, self.stages.not_stored(), True)))
        elif not self.stages.files_pending and folder.marked:
            self.guard("the kept marker", folder.unmark)

    def _start(self, started: str, source: str | None, log_start: int) -> None:
        if not self.run_uri:
            return
        from ..storage.opening import objects_for
        from .live_rows import both
        from .logparts import LogParts
        from .outcome import Outcome

        objects = objects_for(self.run_uri)
        self.outcome = outcome = Outcome(self.run_uri, self.run_id, self.env, objects, say, self.attempt)
        outcome.started(started)
        if source is None:
            say("stdout is not a file: the log is not written to the run's storage (rtjob archives it when it "
                "sees the run end)")
        else:
            rows = self.stages.rows = self._live_rows()
            on_text = outcome.saw_text if rows is None else both(outcome.saw_text, rows.feed)
            from .tracking.mirrors import mirror_for, noted_in  # the job's `tracking:`: rows and epochs
            folder = rows.folder if rows else None
            self.stages.tracker = mirror_for(self.env, self.run_id, folder, say, noted_in(outcome), objects)
            self.stages.parts = LogParts(source, objects, self.attempt, self.secrets, say, on_text=on_text)
            self.log_file = source
            outcome.log_from(log_start)
        if self.run_dir:
            self._seed(objects, self.run_dir)
        if self.input_dir and self.input_uri and "://" in self.input_uri:
            self.guard("the step's input", self._input_down)

    def _seed(self, objects: Objects, run_dir: str) -> None:
        """What earlier attempts synced, in RTJOB_RUN_DIR before the entrypoint starts; the folder's sync."""
        from ..storage.dir_sync import DirSync
        from ..storage.run_files import seed

        self.stages.sync = sync = DirSync(run_dir, objects, say=say, attempt_id=self.attempt)
        try:
            seeded = patiently(lambda: seed(objects, run_dir))  # a reader's patience: the script waits for it
        except Exception as exc:  # noqa: BLE001 - the run goes on; what is in storage is never overwritten
            say(f"RTJOB_RUN_DIR not seeded from the run's storage "
                f"({one_line(exc)}): its objects are left as they are")
        else:
            sync.adopt(seeded)
            if seeded.ours:
                say(f"{len(seeded.ours)} file(s) earlier attempts of the run synced are in RTJOB_RUN_DIR again")

    def _input_down(self) -> None:
        """The step before's output into RTJOB_INPUT_DIR (never uploaded back)."""
        from ..storage.opening import objects_for
        from ..storage.run_files import download_folder

        assert self.input_uri is not None and self.input_dir is not None
        with objects_for(self.input_uri) as objects:
            input_dir = self.input_dir
            got = patiently(lambda: download_folder(objects, input_dir), grace_s(self.env))
        say(f"the step's input: {len(got)} file(s) from {self.input_uri} in {self.input_dir}")

    def _live_rows(self) -> LiveRows | None:
        """The rows' collector, writing where the script's RTJOB_RUN_DIR is (the node folder, or the run's own
        local folder); None without one."""
        from .live_rows import LiveRows, own_sampler

        folder = self.run_dir or (self.env.get(contract.ENV_RUN_DIR) if self.run_uri and "://" not in self.run_uri
                                  else None)
        return LiveRows(folder, say, own_sampler()) if folder and os.path.isdir(folder) else None

    def _end(self, ended: ChildExit) -> None:
        if self.outcome is None:
            if self.folder is not None:
                say(f"the node folder {self.folder.path} was kept: the run's storage was never reached")
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)  # the companion's own CPU, not the entrypoint's
        store_the_end(self, ended, round(usage.ru_utime + usage.ru_stime, 3))
        tracker, outcome = self.stages.tracker, self.outcome
        for name, one in tracker.each() if tracker is not None else []:  # after the run's own end: never delays it
            self.guard(name, lambda one=one: one.finish(str((outcome.end or {}).get("status"))))  # type: ignore[misc]
        if tracker is not None:
            outcome.settle()

    def say_line(self, text: str) -> None:
        say(redact(text, self.secrets))

    def guard(self, what: str, call: Callable[[], object]) -> None:
        """A companion step: an error is one line in the driver log, never the run's end."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the script's outcome must not depend on rtjob's
            say(f"{what}: {redact(str(one_line(exc)), self.secrets)}")


def _sealed_env() -> bool:
    """Whether the run's sealed package carries variables (forwarded credentials, notify URLs) its workers need."""
    with contextlib.suppress(OSError, ValueError):
        return bool(sealed(SEALED_ENV_FILE))
    return False


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if len(args) != 1:
        say("usage: python -m rtjob.runside.companion ENTRYPOINT (one argument, as Ray's shell gets it)")
        os._exit(2)
    entrypoint = args[0]
    unseal(os.environ)  # forwarded credentials and notify URLs: before anything reads the run's storage
    if os.environ.get(contract.ENV_COMPANION) == "0":
        os.execv("/bin/sh", ["/bin/sh", "-c", entrypoint])
    ended = Companion(entrypoint, os.environ).run()
    sys.stdout.flush()
    sys.stderr.flush()
    ended.exit()


if __name__ == "__main__":
    main()
