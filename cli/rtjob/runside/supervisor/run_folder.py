"""The run's folder as its supervisor sees it: the stop marker, and the record's transitions it writes, each a
lifecycle kernel value (``Beat``, ``Retrying``, ``GaveUp``, ``Saved``: its own log) handed to the kernel's one writer call; a
retry's notice and a given-up run's end told once; the ended attempt's log and its own log archived. Imports at
module level: the stdlib, rtjob_contract and the lifecycle kernel only (the cluster runs it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.clock import now_iso
from ...core.errors import one_line
from ...core.lifecycle import Writer

if TYPE_CHECKING:
    from ...core.record import RunRecord  # noqa: F401 - the annotations' name (imported where it is made)
    from .loop import SupervisedRun

OWN_LOG_BYTES = 4 << 20  # the supervisor's own log, archived at its end: its last 4 MiB (a line every retry)
WRITER = Writer.SUPERVISOR.recorded_as  # the name the record keeps (carried_by, completed_by)


def say(text: str) -> None:
    print(f"rtjob supervisor: {text}", flush=True)


class RunFolder:
    """The run's folder (RTJOB_RUN_URI; None: the run keeps none) as its supervisor writes it."""

    def __init__(self, run_id: str, run_uri: str | None) -> None:
        self.run_id = run_id
        self.run_uri = run_uri

    def stop_requested(self) -> bool:
        if not self.run_uri:
            return False
        from ...storage.opening import objects_for

        try:
            with objects_for(self.run_uri) as objects:
                return objects.head(contract.STOP_MARKER_FILE) is not None
        except Exception as exc:  # noqa: BLE001 - a folder out of reach reads as no stop (as the companion does)
            say(f"stop marker not readable: {one_line(exc)}")
            return False

    def _write(self, transitions: list[Any], *, indexed: bool, create: bool = False,
               tell: Callable[[RunRecord], None] | None = None) -> RunRecord | None:
        """Transitions of the run's record (core/lifecycle values) through the kernel's one writer call: the
        record, then (``indexed``) its index entry, then (``tell``) the notification. ``create``: a record made
        when the run's folder has none yet; else a missing record is left missing."""
        if not self.run_uri:
            return None
        from ...core import lifecycle
        from ...storage.run_ports import run_ports

        new = lifecycle.blank(self.run_id, self.run_uri, os.environ) if create else None
        return lifecycle.write(run_ports(self.run_uri), transitions, new=new, indexed=indexed, tell=tell)

    def beat(self, attempt: str | None) -> None:
        """``carried_by: supervisor`` and ``last_seen`` now in the run's record (``attempt``: None when the run has
        ended: the record still names the supervisor as who carries it). No index entry: not a status change."""
        from ...core import lifecycle

        self._write([lifecycle.Beat(Writer.SUPERVISOR)], indexed=False, create=True)
        del attempt

    def tell(self, message: Any, *, run_end: bool = False) -> None:
        """``message`` to the run's notify targets (its config from this process's env), exactly once: only whoever
        creates the run folder's ``rtjob-notifying-<outcome>`` marker first sends it (what the targets answered
        recorded after: notify/markers.py settle_in). ``run_end``: the run's own
        end, which a pipeline's step tells only with ``notify.steps``."""
        if not self.run_uri:
            return
        from ...notify import claim_in, config_from_env, run_end_notifies, send, settle_in
        from ...storage.opening import objects_for

        try:
            config = config_from_env(os.environ)
        except ValueError:
            return
        if config is None or (run_end and not run_end_notifies(config, os.environ)):
            return
        run_uri = self.run_uri

        def claim(outcome: str) -> bool:
            with objects_for(run_uri) as objects:
                return claim_in(objects, outcome, now_iso())

        def settle(told: Any, sent: list[str], failed: list[dict[str, str]]) -> None:
            with objects_for(run_uri) as objects:
                settle_in(objects, told, sent, failed, now_iso())

        send(config, message, claim, say=say, settle=settle)

    def retrying(self, failed: str, reason: str, attempt: int, retry: str) -> None:
        """The retry it submitted: the record's ``retrying`` transition (PENDING again, indexed), then
        `notify: on: [retrying]` told to the run's targets once (the ``rtjob-notified-retrying-N`` marker, as a
        client that submits a retry claims it)."""
        from ...core import lifecycle
        from ...notify import Message

        self.archive_log(failed)
        try:
            self._write([lifecycle.Retrying(attempt, reason, failed, retry, by=Writer.SUPERVISOR)], indexed=True)
        except Exception as exc:  # noqa: BLE001 - the retry runs; its companion records its start
            say(f"record not updated: {one_line(exc)}")
        self.tell(Message(job=os.environ.get(contract.ENV_JOB_NAME) or None, run_id=self.run_id,
                          outcome=f"retrying-{attempt + 1}", duration_s=None, cost_usd=None,
                          error=f"attempt {attempt} {reason}; attempt {attempt + 1} is {retry}"))

    def archive_log(self, attempt_id: str) -> None:
        """The ended attempt's ``logs/<attempt id>.log`` from its parts, when its companion could not write it."""
        if not self.run_uri:
            return
        from ...storage.records import archive_attempt_log

        try:
            archive_attempt_log(self.run_uri, None, attempt_id)
        except Exception as exc:  # noqa: BLE001 - its parts stay readable
            say(f"log of {attempt_id} not archived: {one_line(exc)}")

    def archive_own_log(self) -> None:
        """The supervisor's own log (its stdout, the file Ray writes its driver log to), masked with the run's
        secrets, as ``logs/<supervisor id>.log`` beside the run's, listed in its record: why it retried or gave up
        stays readable once its cluster is gone."""
        if not self.run_uri:
            return
        from ...core.redact import redact, secret_values
        from ...storage.records import write_log
        from ..outcome import job_metadata

        try:
            sys.stdout.flush()
            source = os.readlink("/proc/self/fd/1")
            if not os.path.isfile(source):
                return
            with open(source, "rb") as f:
                f.seek(max(0, os.path.getsize(source) - OWN_LOG_BYTES))
                text = f.read().decode("utf-8", errors="replace")
            own_id = str(job_metadata(os.environ).get("job_submission_id") or f"{self.run_id}-supervisor")
            rel = write_log(self.run_uri, contract.attempt_log_name(own_id),
                            redact(text, secret_values(os.environ)), None)
            from ...core import lifecycle

            self._write([lifecycle.Saved(Writer.SUPERVISOR, (rel,))], indexed=False)
        except Exception as exc:  # noqa: BLE001 - its log stays on the cluster while the cluster lives
            say(f"own log not archived: {one_line(exc)}")

    def gave_up(self, line: str) -> None:
        """The run ends FAILED though the rule would retry it: ``line`` (why) becomes its record's message, the
        index hears it, and the run's end is told (its last attempt's companion left `failed` untold: a retry was
        due)."""
        from ...core import lifecycle
        from ..outcome import message_for

        try:
            self._write([lifecycle.GaveUp(line, by=Writer.SUPERVISOR)], indexed=True,
                        tell=lambda record: self.tell(message_for(record), run_end=True))
        except Exception as exc:  # noqa: BLE001 - the line is in the supervisor's log already
            say(f"record not updated: {one_line(exc)}")

    def supervised(self) -> SupervisedRun:
        """What the supervisor's loop writes through (loop.py)."""
        from .loop import SupervisedRun

        return SupervisedRun(stop_requested=self.stop_requested, beat=self.beat, say=say, gave_up=self.gave_up,
                             retrying=self.retrying)
