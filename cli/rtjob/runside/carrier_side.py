"""The run side of a supervisor (rtjob.runside.supervisor): the run's folder as it sees it (the stop marker, the
record's heartbeat, a retry's notice, a run it cannot retry). Imports at module level: the stdlib and
rtjob_contract only (the cluster runs it)."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import rtjob_contract as contract

WRITER = "supervisor"


def say(text: str) -> None:
    print(f"rtjob supervisor: {text}", flush=True)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class RunSide:
    """The run's folder as the supervisor sees it: the stop marker and the record's heartbeat."""

    def __init__(self, run_id: str, run_uri: str | None) -> None:
        self.run_id = run_id
        self.run_uri = run_uri

    def stop_requested(self) -> bool:
        if not self.run_uri:
            return False
        from ..storage.opening import objects_for

        try:
            with objects_for(self.run_uri) as objects:
                return objects.head(contract.STOP_MARKER_FILE) is not None
        except Exception as exc:  # noqa: BLE001 - a folder out of reach reads as no stop (as the companion does)
            say(f"stop marker not readable: {getattr(exc, 'message', None) or type(exc).__name__}")
            return False

    def beat(self, attempt: str | None) -> None:
        """``carried_by: supervisor`` and ``last_seen`` now in the run's record (``attempt``: None when the run has
        ended: the record still names the supervisor as who carried it)."""
        if not self.run_uri:
            return
        from ..core.record import RunRecord
        from ..storage.records import update_record

        run_uri = self.run_uri

        def change(stored: RunRecord | None) -> RunRecord:
            record = stored or RunRecord(id=self.run_id, job=os.environ.get(contract.ENV_JOB_NAME) or None,
                                         backend=os.environ.get(contract.ENV_BACKEND) or "unknown",
                                         storage_uri=run_uri)
            record.carried_by = WRITER
            record.last_seen = _now()
            record.updated_at = record.last_seen
            return record

        update_record(run_uri, None, change)
        del attempt

    def tell(self, message: Any, *, run_end: bool = False) -> None:
        """``message`` to the run's notify targets (its config from this process's env), exactly once: only whoever
        creates the run folder's ``rtjob-notifying-<outcome>`` marker first sends it (what the targets answered
        recorded after: runs/notify.py settle_in). ``run_end``: the run's own
        end, which a pipeline's step tells only with ``notify.steps``."""
        if not self.run_uri:
            return
        from ..runs.notify import claim_in, config_from_env, run_end_notifies, send, settle_in
        from ..storage.opening import objects_for

        try:
            config = config_from_env(os.environ)
        except ValueError:
            return
        if config is None or (run_end and not run_end_notifies(config, os.environ)):
            return
        run_uri = self.run_uri

        def claim(outcome: str) -> bool:
            with objects_for(run_uri) as objects:
                return claim_in(objects, outcome, _now())

        def settle(told: Any, sent: list[str], failed: list[dict[str, str]]) -> None:
            with objects_for(run_uri) as objects:
                settle_in(objects, told, sent, failed, _now())

        send(config, message, claim, say=say, settle=settle)

    def retried(self, failed: str, reason: str, attempt: int, retry: str) -> None:
        """`notify: on: [retrying]`: the retry it submitted told to the run's targets, once (the
        ``rtjob-notified-retrying-N`` marker, as a client that submits a retry claims it)."""
        from ..runs.notify import Message

        self.archive_log(failed)
        self.tell(Message(job=os.environ.get(contract.ENV_JOB_NAME) or None, run_id=self.run_id,
                          outcome=f"retrying-{attempt + 1}", duration_s=None, cost_usd=None,
                          error=f"attempt {attempt} {reason}; attempt {attempt + 1} is {retry}"))

    def archive_log(self, attempt_id: str) -> None:
        """The ended attempt's ``logs/<attempt id>.log`` from its parts, when its companion could not write it."""
        if not self.run_uri:
            return
        from ..storage.records import archive_attempt_log

        try:
            archive_attempt_log(self.run_uri, None, attempt_id)
        except Exception as exc:  # noqa: BLE001 - its parts stay readable
            say(f"log of {attempt_id} not archived: {getattr(exc, 'message', None) or type(exc).__name__}")

    def gave_up(self, line: str) -> None:
        """The run ends FAILED though the rule would retry it: ``line`` (why) becomes its record's message."""
        if not self.run_uri:
            return
        from ..core.model import RunStatus
        from ..core.record import RunRecord
        from ..storage.records import update_record

        def change(stored: RunRecord | None) -> RunRecord | None:
            if stored is None:
                return None
            stored.status = RunStatus.FAILED.value
            stored.message = line
            stored.updated_at = _now()
            return stored

        try:
            record = update_record(self.run_uri, None, change)
        except Exception as exc:  # noqa: BLE001 - the line is in the supervisor's log already
            say(f"record not updated: {getattr(exc, 'message', None) or type(exc).__name__}")
            return
        if record is not None:  # its last attempt's companion left `failed` untold: a retry was due
            from .outcome import message_for

            self.tell(message_for(record), run_end=True)
