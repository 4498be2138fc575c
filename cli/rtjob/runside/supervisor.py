"""``python -m rtjob.runside.supervisor RUN_ID BACKEND``: a run's supervisor, a Ray job of its own (``<run id>-supervisor``)
that the submitting client starts when the run allows retries. It carries the run's retries with no rtjob client
alive (the backend's rule: backends/ray/supervisor.py), and keeps its state in the run's record in storage: who
carries the run (``carried_by: supervisor``) and when it was last seen (``last_seen``, every ~30 s and at each
change). The run's stop marker (``rtjob stop`` writes it first) is read before and after each submit.

Its environment is the run's (the record's folder RTJOB_RUN_URI and its credentials) plus the dashboard's address
(RTJOB_DASHBOARD_ADDRESS). Imports at module level: the stdlib, rtjob_contract and requests only."""

from __future__ import annotations

import datetime as dt
import os
import sys

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
                                         backend="unknown", storage_uri=run_uri)
            record.carried_by = WRITER
            record.last_seen = _now()
            record.updated_at = record.last_seen
            return record

        update_record(run_uri, None, change)
        del attempt

    def retried(self, failed: str, reason: str, attempt: int, retry: str) -> None:
        """`notify: on: [retrying]`: the retry it submitted told to the run's targets, once (the
        ``rtjob-notified-retrying-N`` marker, as a client that submits a retry claims it)."""
        if not self.run_uri:
            return
        from ..runs.notify import Message, config_from_env, send
        from ..storage.objects import PreconditionFailed
        from ..storage.opening import objects_for

        try:
            config = config_from_env(os.environ)
        except ValueError:
            return
        if config is None:
            return
        run_uri = self.run_uri

        def claim(outcome: str) -> bool:
            with objects_for(run_uri) as objects:
                try:
                    objects.put(contract.notified_marker(outcome), b"", if_absent=True)
                    return True
                except PreconditionFailed:
                    return False

        message = Message(job=os.environ.get(contract.ENV_JOB_NAME) or None, run_id=self.run_id,
                          outcome=f"retrying-{attempt + 1}", duration_s=None, cost_usd=None,
                          error=f"attempt {attempt} {reason}; attempt {attempt + 1} is {retry}")
        send(config, message, claim, say=say)

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
            update_record(self.run_uri, None, change)
        except Exception as exc:  # noqa: BLE001 - the line is in the supervisor's log already
            say(f"record not updated: {getattr(exc, 'message', None) or type(exc).__name__}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        say("usage: python -m rtjob.runside.supervisor RUN_ID BACKEND")
        sys.exit(2)
    run_id, backend = args
    from ..backends import backend_class
    from ..backends.base import CarryHooks

    side = RunSide(run_id, os.environ.get(contract.ENV_RUN_URI) or None)
    hooks = CarryHooks(stop_requested=side.stop_requested, beat=side.beat, say=say, gave_up=side.gave_up,
                       retried=side.retried)
    try:
        code = backend_class(backend).carry(run_id, hooks)
    except Exception as exc:  # noqa: BLE001 - one line in its log, not a traceback
        say(f"stopped carrying {run_id}: {getattr(exc, 'message', None) or f'{type(exc).__name__}: {exc}'}")
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
