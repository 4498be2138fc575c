"""The run's record as the run side writes it: its start (who carries it, when the driver started), a heartbeat
(``last_seen``), the start-up timeline, and its end (status, exit code, end time, cost, metrics summary, the log,
``completed_by: companion``), then the notification of the outcome. Each write is a list of the lifecycle
kernel's transitions (core/lifecycle: Stages, Beat, Started, AttemptEnded, Saved, Outputs), values handed to its
one writer call: the record (If-Match: the submitting client and this companion may write at the same time, and
neither loses the other's fields), then the index entry on a status change, then the notification.

No write is dropped: one that storage refused is owed (``owed``) and tried again, in order, before any later one
(``settle``, each tick and through the end's wait for storage), until it is stored."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ..core import lifecycle
from ..core.clock import now_iso, parse
from ..core.errors import StorageError, one_line
from ..core.lifecycle import Writer
from ..core.model import RunStatus
from ..core.record import RunRecord
from ..core.redact import redact
from ..core.retry_rule import AttemptEnd, attempt_number, killed_by, max_retries, retries_left, retry_reason
from ..storage.run_ports import run_ports
from .train_phases import event_times

if TYPE_CHECKING:
    from ..notify import Message
    from ..storage.objects import Objects
    from .child import ChildExit

RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # Ray's runtime_env and metadata for the driver (JSON)


TAIL_BYTES = 64 * 1024  # of the driver log kept in memory for the error line


def job_metadata(env: Mapping[str, str]) -> dict[str, Any]:
    """The job's metadata as Ray gives it to the driver (rtjob's keys, and Ray's own job_submission_id)."""
    import json

    try:
        metadata = json.loads(env.get(RAY_JOB_CONFIG) or "{}").get("metadata") or {}
    except (ValueError, TypeError, AttributeError):
        return {}
    return metadata if isinstance(metadata, dict) else {}


def attempt_end(ended: ChildExit, terminated: bool, stop_requested: bool, time_limit: float | None) -> tuple[str, str | None]:
    """(status, message) of an attempt that ended so: SUCCEEDED on 0; STOPPED when `rtjob stop` asked first
    (its marker) and the stop's SIGTERM came; the time limit; else FAILED with why (a kill by SIGTERM or
    SIGKILL without a stop marker stays retriable: the driver was lost, not stopped)."""
    if ended.timed_out:
        limit = f"{time_limit:g}" if time_limit else "?"
        return RunStatus.FAILED.value, f"stopped by its time limit timeout_s={limit} (exit code {ended.code})"
    killer = killed_by(ended.code)
    if stop_requested and (terminated or killer):
        return RunStatus.STOPPED.value, "stopped (rtjob stop)"
    if ended.code == 0:
        return RunStatus.SUCCEEDED.value, None
    if killer:
        return RunStatus.FAILED.value, f"the entrypoint was killed by {killer} (exit code {ended.code})"
    if ended.code < 0:
        return RunStatus.FAILED.value, f"the entrypoint was killed by {ended.signal_name or -ended.code}"
    return RunStatus.FAILED.value, ended.reason or f"the entrypoint exited with code {ended.code}"


class Outcome:
    def __init__(self, run_uri: str, run_id: str, env: Mapping[str, str], objects: Objects,
                 say: Callable[[str], None], attempt_id: str | None = None) -> None:
        self.run_uri = run_uri
        self.run_id = run_id
        self.attempt_id = attempt_id or run_id
        self.env = env
        self.objects = objects
        self.say = say
        self.endpoint = None  # objects_for found it in the environment, as the entrypoint's S3 clients do
        self.timeline: dict[str, str] = {}
        self._seen = 0  # log bytes seen so far (the timeline's first line is after log_start)
        self.log_start: int | None = None
        self._peeked = 0  # how far watch() has read the log
        self._tail = b""  # the log's last TAIL_BYTES: a failed run's message says its error line (notify.py)
        self.owed: list[tuple[list[Any], bool, Callable[[RunRecord], None] | None]] = []
        self._fault: str | None = None  # the storage fault last said (said again only when it changes)
        self.fault: StorageError | None = None  # the last owed write's storage fault (None: none is failing)
        self.end: dict[str, Any] | None = None  # the attempt's end as ``ended`` recorded it (a kept marker's)

    # -- the timeline -------------------------------------------------------------------------------------
    def log_from(self, offset: int) -> None:
        self.log_start = self._peeked = offset

    def _watched(self) -> bool:  # at a Train script's first report, or rtjob's first step when no Train phase came
        return contract.EVENT_FIRST_REPORT in self.timeline or (
            contract.EVENT_FIRST_STEP in self.timeline and not any(p in self.timeline for p in contract.TRAIN_PHASES))

    def watch(self, source: str) -> None:
        """Called every tick until the watch ends (``_watched``): the log's first line after the driver started (its
        size grew) and the event lines, read from where the last look stopped (at most 1 MiB a tick)."""
        if self._watched() or self.log_start is None:
            return
        try:
            with open(source, "rb") as f:
                f.seek(self._peeked)
                chunk = f.read(1 << 20)
        except OSError:
            return
        if not chunk:
            return
        when = now_iso()
        self.timeline.setdefault("first_log_line", when)
        self._note_events(chunk, when)
        cut = chunk.rfind(b"\n") + 1  # the next look starts at a line's start: an event line is never cut
        self._peeked += cut if cut or len(chunk) == 1 << 20 else 0

    def saw_text(self, chunk: bytes) -> None:
        """A new stretch of the driver log (in order): the first line after the driver started, and event lines."""
        self._seen += len(chunk)
        self._tail = (self._tail + chunk)[-TAIL_BYTES:]
        when = now_iso()
        if "first_log_line" not in self.timeline and self.log_start is not None and self._seen > self.log_start:
            self.timeline["first_log_line"] = when
        if not self._watched():
            self._note_events(chunk, when)

    def _note_events(self, chunk: bytes, when: str) -> None:
        """The event lines in ``chunk``, each noted once: at the time its line carries, else at ``when``."""
        if contract.EVENT_LINE_PREFIX.encode() not in chunk:
            return
        for name, at in event_times(chunk):
            if name not in self.timeline:
                self.timeline[name] = at or when

    # -- writes: each a transition of the lifecycle kernel, through its one writer call ---------------------
    def _number(self) -> int:
        """This attempt's number (1: the first), from rtjob's metadata in Ray's job config."""
        return attempt_number(job_metadata(self.env))

    def _write(self, transitions: list[Any], *, indexed: bool,
               tell: Callable[[RunRecord], None] | None = None) -> None:
        """The transitions owed, then every owed write tried in order (a refused one stays owed)."""
        self.owed.append((transitions, indexed, tell))
        self.settle()

    def settle(self) -> bool:
        """Try the owed writes in order; True when none is left. A storage fault stops the round (one line when
        its wording changes); any other error is the writer's bug: said, and that write dropped."""
        while self.owed:
            transitions, indexed, tell = self.owed[0]
            try:
                self._apply(transitions, indexed=indexed, tell=tell)
            except StorageError as exc:
                self.fault = exc
                if self._fault != exc.message:
                    self._fault = exc.message
                    self.say(f"the run's record not stored yet ({exc.message}); tried again")
                return False
            except Exception as exc:  # noqa: BLE001 - a bug in a transition: never the run's end
                self.say(f"the run's record: {one_line(exc)}")
            self.owed.pop(0)
        self.fault = None
        if self._fault is not None:
            self._fault = None
            self.say("the run's record is stored again")
        return True

    def _apply(self, transitions: list[Any], *, indexed: bool,
               tell: Callable[[RunRecord], None] | None = None) -> RunRecord | None:
        """The attempt's stages seen so far and a beat, then ``transitions``, in the kernel's one writer call (a
        record made where none is stored yet)."""
        ports = run_ports(self.run_uri, self.endpoint)
        ports.cost = _cost
        steps = [lifecycle.Stages(self.attempt_id, dict(self.timeline)), lifecycle.Beat(Writer.COMPANION),
                 *transitions]
        return lifecycle.write(ports, steps, new=lifecycle.blank(self.run_id, self.run_uri, self.env),
                               indexed=indexed, tell=tell)

    def started(self, when: str) -> None:
        self.timeline["driver_started"] = when
        self._write([lifecycle.Started(self.attempt_id, self._number(), when)], indexed=True)

    def heartbeat(self) -> None:
        """``last_seen`` now: an owed write beats too, so a heartbeat is owed only when nothing else is."""
        if self.owed:
            self.settle()
        else:
            self._write([], indexed=False)

    def stop_requested(self) -> bool:
        """Whether `rtjob stop` asked first (its marker); unknown while storage fails: then not."""
        try:
            return self.objects.head(contract.STOP_MARKER_FILE) is not None
        except StorageError as exc:
            self.say(f"the stop marker not read ({exc.message}): taken as absent")
            return False

    def ended(self, ended: ChildExit, terminated: bool, time_limit: float | None, logs: list[str],
              secrets: list[str], cpu_s: float | None = None, sync_notes: list[str] | None = None,
              outputs: tuple[bool, int, str | None] = (True, 0, None)) -> None:
        """The attempt's end, owed until stored; ``outputs``: (complete, files not stored, where they are kept)."""
        stop_requested = self.stop_requested()
        status, message = attempt_end(ended, terminated, stop_requested, time_limit)
        end = AttemptEnd(status, ended.code, timed_out=ended.timed_out, stop_requested=stop_requested)
        when = now_iso()
        self.timeline["ended"] = when
        metrics = self._metrics() if outputs[0] else None
        masked = redact(message, secrets) if message else None
        self.end = {"status": status, "exit_code": ended.code, "message": masked, "at": when,
                    "timed_out": ended.timed_out, "stop_requested": stop_requested, "number": self._number()}

        change = [lifecycle.AttemptEnded(self.attempt_id, self._number(), end, masked, when, cpu_s=cpu_s,
                                         sync_notes=tuple(redact(line, secrets) for line in sync_notes or [])),
                  lifecycle.Saved(Writer.COMPANION, tuple(logs), self.run_uri, metrics),
                  lifecycle.Outputs(*outputs, at=when)]

        # A lost driver with retries left is not told: its last attempt tells how the run ended.
        retry_due = retry_reason(end) is not None and retries_left(self._number(), self._max_retries())
        self._write(change, indexed=True, tell=None if retry_due else lambda record: self._notify(record, secrets))

    def _max_retries(self) -> int:
        return max_retries(job_metadata(self.env))

    def _metrics(self) -> dict[str, Any] | None:
        from ..storage.records import metrics_summary

        try:
            return metrics_summary(self.run_uri, self.endpoint)
        except Exception as exc:  # noqa: BLE001 - no metrics is not the run's failure
            self.say(f"metrics summary not recorded: {one_line(exc)}")
            return None

    def _notify(self, record: RunRecord | None, secrets: list[str]) -> None:
        """The outcome's notification, exactly once: only whoever creates its marker first sends it."""
        if record is None:
            return
        from ..notify import config_from_env, run_end_notifies, send, settle_in

        config = config_from_env(self.env)
        if config is None or not run_end_notifies(config, self.env):
            return
        from ..notify import error_line_of

        error = error_line_of(redact(self._tail.decode(errors="replace"), secrets))
        send(config, message_for(record, error), self._claim, say=lambda line: self.say(redact(line, secrets)),
             settle=lambda message, sent, failed: settle_in(self.objects, message, sent, failed, now_iso()))

    def _claim(self, outcome: str) -> bool:
        from ..notify import claim_in

        return claim_in(self.objects, outcome, now_iso())


def message_for(record: RunRecord, error_line: str | None = None) -> Message:
    """The notification of a run's end, from its record; ``error_line``: the error as its log shows it (a
    traceback's last line), which says more than the record's message ("the entrypoint exited with code 1")."""
    from ..notify import Message

    cost = (record.cost or {}).get("estimated_usd")
    failed = record.status != RunStatus.SUCCEEDED.value
    return Message(job=record.job, run_id=record.id, outcome=record.status.lower(), duration_s=_seconds(record),
                   cost_usd=cost, error=(error_line or record.message) if failed else None)


def _seconds(record: RunRecord) -> float | None:
    try:
        start = parse(record.start_time or "")
        end = parse(record.end_time or "")
    except ValueError:
        return None
    return max(0.0, (end - start).total_seconds())


def _cost(record: RunRecord) -> dict[str, Any] | None:
    """The finished run's estimated cost from the rate recorded at submit (None: no rate, or not one)."""
    from ..jobspec.pricing import (  # cluster-safe: tests/unit/test_cluster_side_imports.py
        HourlyCost,
        run_cost,
    )

    with contextlib.suppress(KeyError, TypeError, ValueError):  # HourlyCost.from_json's "not a rate"
        return run_cost(record.to_run_info(), HourlyCost.from_json(record.rate)) if record.rate else None
    return None
