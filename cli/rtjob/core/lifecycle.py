"""A run's lifecycle: its states, its writers, the legal transitions (named functions over its record) and whose
end stands when two writers disagree. Every writer of a run's record goes through here; docs/ARCHITECTURE.md has
the same as one table (states × writers).

A record has several writers at once (the submitting client, a client that follows or looks, the run's companion,
its supervisor, a pipeline's supervisor, the client's archive), each writing with If-Match (storage/records.py):
each transition is applied to the record as stored, so it is written over the latest version, and each is
idempotent (applied twice, the record is the same), so a writer that crashed after the record and before the index
entry or the notification calls it again and repairs (``write``). An illegal transition raises
``IllegalTransition`` (an internal error: a writer's bug, never the run's end).

Stdlib and rtjob.core only: the cluster imports it (the companion and the supervisor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import rtjob_contract as contract

from . import clock
from .errors import RtjobError
from .model import RunStatus, stamp
from .record import END_FIELDS, STALE_S, RunRecord
from .retry_rule import AttemptEnd, retry_reason

ENDS = frozenset(s.value for s in RunStatus if s.terminal)
LATEST_LOG = f"{contract.RUN_LOGS_DIR}/{contract.DRIVER_LOG_FILE}"  # the latest attempt's whole log


class Writer(str, Enum):
    """Who writes a run's record. ``recorded_as``: the name its record keeps (``carried_by``, ``completed_by``)."""

    SUBMITTER = "submitter"  # the client that submitted the run
    FOLLOWER = "follower"  # a client that follows (submit, wait) or looks (status, show, list, runs)
    ARCHIVE = "archive"  # a client that saw the run end and saves its logs and final state
    COMPANION = "companion"  # the run's entrypoint wrapper, beside the driver, one per attempt
    SUPERVISOR = "supervisor"  # the run's supervisor on the cluster: its retries across attempts
    PIPELINE_SUPERVISOR = "pipeline supervisor"  # a pipeline's supervisor: its steps, in order
    KEEPER = "keeper"  # a queue's keeper on the cluster: admits a queued run, or ends it cancelled (core/queueing.py)

    @property
    def recorded_as(self) -> str:
        return _RECORDED_AS[self]


_RECORDED_AS = {Writer.SUBMITTER: "client", Writer.FOLLOWER: "client", Writer.ARCHIVE: "client",
                Writer.COMPANION: "companion", Writer.SUPERVISOR: "supervisor",
                Writer.PIPELINE_SUPERVISOR: "supervisor", Writer.KEEPER: "keeper"}

# Whose end stands: an end written by a higher rank is never replaced by a lower one's; between equals the later
# write stands (a retry's companion ends the run after its first attempt's did). The run side saw the end where the
# run was; a client saw it through the backend, later and from afar.
PRECEDENCE: dict[str | None, int] = {None: 0, "client": 1, "companion": 2, "supervisor": 2, "keeper": 2}


def rank(completed_by: str | None) -> int:
    """The precedence of an end written by ``completed_by`` (a name a record keeps; an unknown one: a client's)."""
    return PRECEDENCE.get(completed_by, 1)


def ended_by_run_side(record: RunRecord | None) -> bool:
    """Whether the record holds an end that the run side wrote (which no client replaces)."""
    return record is not None and rank(record.completed_by) >= rank(Writer.COMPANION.recorded_as)


class IllegalTransition(RtjobError):
    """A writer asked for a transition the lifecycle refuses (an internal error, never a run's end)."""


def _refuse(record: RunRecord, what: str, why: str) -> IllegalTransition:
    return IllegalTransition(f"run {record.id}: {what} refused: {why}")


def _attempt(record: RunRecord, attempt_id: str) -> dict[str, Any] | None:
    return next((a for a in record.attempts if isinstance(a, dict) and a.get("id") == attempt_id), None)


def _later_attempt(record: RunRecord, number: int) -> str | None:
    """The id of an attempt after ``number`` the record already has (its end or start stands over this one's)."""
    return next((str(a.get("id")) for a in record.attempts if isinstance(a, dict)
                 and isinstance(a.get("attempt"), int) and a["attempt"] > number), None)


def _set_attempt(record: RunRecord, attempt_id: str, number: int, status: str, code: int | None,
                 reason: str | None) -> None:
    """The attempt in the record's attempts (Attempt.to_json()'s shape, in attempt order)."""
    entry = {"id": attempt_id, "attempt": number, "status": status, "exit_code": code, "retry_reason": reason}
    others = [a for a in record.attempts if isinstance(a, dict) and a.get("id") != attempt_id]
    record.attempts = sorted([*others, entry], key=lambda a: a.get("attempt") or 0)


def _reopen(record: RunRecord) -> None:
    """An earlier attempt's end cleared: a next attempt is on its way (each attempt's own log stays listed)."""
    attempt_logs = [rel for rel in record.logs if rel != LATEST_LOG]
    for name in END_FIELDS:
        setattr(record, name, {"logs": [], "archived": False, "sync_notes": []}.get(name))
    record.logs = attempt_logs


# ---------------------------------------------------------------------------------------------------------------
# The transitions. Each changes ``record`` in place, returns it, and raises IllegalTransition when it may not.


def submitted(record: RunRecord, at: str | None = None, *, staged: bool = True) -> RunRecord:
    """A client submitted the run: PENDING (or what the backend already says), the timeline's ``submitted``.
    ``staged=False``: the record a client writes before it sends the run (its storage check,
    runs/lifecycle/storage_check.py): PENDING under its planned id, the timeline's stage left to the submit that
    follows (the moment it was sent, after the embedded cluster started)."""
    if record.run_status.terminal and not record.submitted_at:
        raise _refuse(record, "submitted", f"the run has ended ({record.status})")
    at = at or clock.now_iso()
    record.submitted_at = record.submitted_at or at
    if record.run_status == RunStatus.UNKNOWN:
        record.status = RunStatus.PENDING.value
    if staged:
        record.timeline.setdefault("submitted", at)
    return record


def started(record: RunRecord, attempt_id: str, number: int, at: str | None = None,
            by: Writer = Writer.COMPANION) -> RunRecord:
    """Attempt ``number`` (``attempt_id``) started: RUNNING. An earlier attempt's end is cleared (this one runs
    now); an attempt that already ended, or one older than an attempt the record has, never starts again."""
    later = _later_attempt(record, number)
    if later is not None:
        raise _refuse(record, f"started({attempt_id})", f"a later attempt ({later}) is recorded")
    mine = _attempt(record, attempt_id)
    if mine is not None and mine.get("status") in ENDS:
        raise _refuse(record, f"started({attempt_id})", f"this attempt ended {mine['status']}")
    at = at or clock.now_iso()
    if record.run_status.terminal or record.completed_by:
        _reopen(record)
    record.status = RunStatus.RUNNING.value
    record.start_time = record.start_time or at
    record.timeline.setdefault("driver_started", at)
    _set_attempt(record, attempt_id, number, RunStatus.RUNNING.value, None, None)
    return beat(record, by, at)


def beat(record: RunRecord, by: Writer, at: str | None = None) -> RunRecord:
    """The run side is alive: ``last_seen``, and who carries the run (a supervisor carries it across attempts: a
    companion never takes that from it). Never a status change; legal in every state."""
    if by not in (Writer.COMPANION, Writer.SUPERVISOR, Writer.PIPELINE_SUPERVISOR):
        raise _refuse(record, "beat", f"only the run side beats, not the {by.value}")
    if by != Writer.COMPANION or record.carried_by != Writer.SUPERVISOR.recorded_as:
        record.carried_by = by.recorded_as
    record.last_seen = at or clock.now_iso()
    record.updated_at = record.last_seen
    return record


def attempt_ended(record: RunRecord, attempt_id: str, number: int, end: AttemptEnd, message: str | None,
                  at: str | None = None, by: Writer = Writer.COMPANION) -> RunRecord:
    """Attempt ``number`` ended (``end``: its verdict): the run's end for now, the attempt's retry reason (the
    one retry rule) beside it. A later attempt's record stands over an older attempt's end."""
    if not RunStatus(end.status).terminal:
        raise _refuse(record, f"attempt_ended({attempt_id})", f"{end.status} is not an end")
    later = _later_attempt(record, number)
    if later is not None:
        raise _refuse(record, f"attempt_ended({attempt_id})", f"a later attempt ({later}) is recorded")
    at = at or clock.now_iso()
    record.status, record.message, record.exit_code = end.status, message, end.exit_code
    record.end_time = at
    record.completed_by = by.recorded_as
    record.timeline.setdefault("ended", at)
    _set_attempt(record, attempt_id, number, end.status, end.exit_code, retry_reason(end))
    return record


def outputs(record: RunRecord, complete: bool, not_stored: int = 0, kept_at: str | None = None,
            at: str | None = None) -> RunRecord:
    """Whether the run's files reached its storage: written with its end by the companion (complete, or what the
    node keeps when the storage grace ran out), and by `rtjob sync` once it stored what was kept. Only after an end:
    a run is never called complete before it ended and its files are stored."""
    if not record.run_status.terminal:
        raise _refuse(record, "outputs", f"the run has not ended ({record.status})")
    record.outputs = ({"complete": True} if complete else
                      {"complete": False, "not_stored": not_stored, "kept_at": kept_at})
    record.updated_at = at or clock.now_iso()
    return record


def retrying(record: RunRecord, n: int, reason: str, failed_id: str, next_id: str, at: str | None = None,
             by: Writer = Writer.SUPERVISOR) -> RunRecord:
    """Retry ``n`` (attempt n + 1, ``next_id``) was submitted after ``failed_id`` FAILED for ``reason``: PENDING
    again, the failed attempt's end kept in its attempts. A run that SUCCEEDED or was STOPPED is never retried."""
    if record.run_status in (RunStatus.SUCCEEDED, RunStatus.STOPPED):
        raise _refuse(record, f"retrying({n})", f"the run ended {record.status}")
    later = _later_attempt(record, n + 1)
    if later is not None:
        raise _refuse(record, f"retrying({n})", f"a later attempt ({later}) is recorded")
    at = at or clock.now_iso()
    failed = _attempt(record, failed_id) or {}
    _set_attempt(record, failed_id, n, RunStatus.FAILED.value, failed.get("exit_code"), reason)
    if _attempt(record, next_id) is None:
        if record.run_status.terminal or record.completed_by:
            _reopen(record)
        _set_attempt(record, next_id, n + 1, RunStatus.PENDING.value, None, None)
        record.status = RunStatus.PENDING.value
        record.message = f"attempt {n} {reason}; attempt {n + 1} is {next_id}"
    record.updated_at = at
    return record


def gave_up(record: RunRecord, why: str, at: str | None = None, by: Writer = Writer.SUPERVISOR) -> RunRecord:
    """The run ends FAILED though the rule would retry it (its code is gone, its supervisor kept dying): ``why``
    becomes its message."""
    if record.run_status in (RunStatus.SUCCEEDED, RunStatus.STOPPED):
        raise _refuse(record, "gave_up", f"the run ended {record.status}")
    at = at or clock.now_iso()
    record.status, record.message = RunStatus.FAILED.value, why
    record.end_time = record.end_time or at
    record.completed_by = by.recorded_as
    record.updated_at = at
    record.timeline.setdefault("ended", at)
    return record


def ended(record: RunRecord, status: RunStatus, by: Writer, at: str | None = None) -> RunRecord:
    """The run ended ``status`` as ``by`` saw it. An end a higher-ranked writer recorded stands (PRECEDENCE)."""
    if not status.terminal:
        raise _refuse(record, f"ended({status.value})", "not an end")
    if record.run_status.terminal and rank(record.completed_by) > rank(by.recorded_as):
        raise _refuse(record, f"ended({status.value}, {by.value})",
                      f"the {record.completed_by}'s end ({record.status}) stands")
    at = at or clock.now_iso()
    record.status = status.value
    record.end_time = record.end_time or at
    record.completed_by = by.recorded_as
    record.timeline.setdefault("ended", record.end_time)
    return record


def progressed(record: RunRecord, status: RunStatus, by: Writer = Writer.FOLLOWER, reopen: bool = False,
               at: str | None = None) -> RunRecord:
    """A pipeline run's progress as the client that advances its steps saw it (PENDING before its first step,
    RUNNING after): never an end (``ended`` writes that), nor over one: an end stands, unless ``reopen`` (the same
    pipeline id submitted again goes on from the steps that succeeded) and it is of the client's own rank."""
    if status.terminal:
        raise _refuse(record, f"progressed({status.value})", "an end is ended()'s")
    if record.run_status.terminal and (not reopen or rank(record.completed_by) > rank(by.recorded_as)):
        raise _refuse(record, f"progressed({status.value}, {by.value})",
                      f"the {record.completed_by or 'recorded'} end ({record.status}) stands")
    if record.run_status.terminal or record.completed_by:
        record.end_time = record.message = record.completed_by = None
        record.archived = False
        record.timeline.pop("ended", None)
    record.status = status.value
    record.updated_at = at or clock.now_iso()
    return record


@dataclass
class Archive:
    """What a client saves of a run it saw end (runs/lifecycle/archive.py): where each attempt's log went, the
    attempts as the backend lists them, the cost, the metrics summary, the folders Ray Train stored the run in."""

    logs: list[str] = dataclasses.field(default_factory=list)
    log_home: str | None = None
    attempts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    cost: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    train_storage: list[str] = dataclasses.field(default_factory=list)
    outputs: dict[str, Any] | None = None  # what the run side said of its outputs where its end is not stored


def archived(record: RunRecord, status: RunStatus, saved: Archive, message: str | None = None,
             by: Writer = Writer.ARCHIVE, at: str | None = None) -> RunRecord:
    """A client saw the run end ``status`` (``message``) and saved its logs and final state (``saved``). An end the
    run side recorded stands, with its log (the archive fills only what it left empty); else the client's end is
    written (``ended``). Either way the record is ``archived``: no later look archives it again."""
    if not status.terminal:
        raise _refuse(record, f"archived({status.value})", "not an end")
    at = at or clock.now_iso()
    if not ended_by_run_side(record):
        ended(record, status, by, at)
        record.message = message
    if not (ended_by_run_side(record) and record.logs):
        record.logs, record.log_home = list(saved.logs) or record.logs, saved.log_home or record.log_home
    if len(saved.attempts) >= len(record.attempts) and saved.attempts:
        record.attempts = saved.attempts
    record.cost = record.cost or saved.cost
    record.metrics = record.metrics or saved.metrics
    record.train_storage = saved.train_storage or record.train_storage
    record.outputs = record.outputs or saved.outputs
    record.archived = True
    record.updated_at = at
    return record


def stale(record: RunRecord, seconds: float = STALE_S) -> str | None:
    """The reader's verdict on a run not ended whose run side was not seen for ``seconds``: why it is UNKNOWN, or
    None. Never written: the run may still be alive. (record.stale_why computes it: record.py cannot import this.)"""
    return record.stale_why(seconds)


def forgotten(record: RunRecord) -> str | None:
    """The reader's verdict on a run its cluster no longer knows: why it is UNKNOWN (its end never recorded), or None."""
    if record.run_status.terminal:
        return None
    return (f"its cluster no longer knows this run; last seen {record.status} at "
            f"{stamp(record.updated_at or record.submitted_at)}, its end was never recorded")


# ---------------------------------------------------------------------------------------------------------------
# Two writers' versions of one record


def _newer_tracking(mine: dict[str, Any] | None, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run side's latest note of where the run is mirrored (runside/tracking/: each carries its time)."""
    return max((t for t in (mine, stored) if t), key=lambda t: str(t.get("at") or ""), default=None)


def merge(mine: RunRecord, stored: RunRecord | None) -> RunRecord:
    """``mine`` (a writer's whole record) to be written over ``stored`` (the version in storage): an end of a
    higher rank is never replaced (each end field it set stays; one it left empty this writer may fill), an end
    already written stays written, the timeline is the union (the earliest time of a stage wins), ``last_seen``
    the latest and ``carried_by`` kept; a run-side status newer than mine (RUNNING over a client's PENDING) too."""
    if stored is None:
        return mine
    merged = dataclasses.replace(mine, timeline={**mine.timeline})
    for stage, when in stored.timeline.items():
        if stage not in merged.timeline or when < merged.timeline[stage]:
            merged.timeline[stage] = when
    merged.last_seen = max(filter(None, (mine.last_seen, stored.last_seen)), default=None)
    merged.carried_by = mine.carried_by or stored.carried_by
    merged.tracking = _newer_tracking(mine.tracking, stored.tracking)
    if rank(stored.completed_by) > rank(mine.completed_by):
        for name in END_FIELDS:  # my message, written in another state than this end's, is not this end's words
            value = getattr(stored, name)
            if value not in (None, [], {}) or (name == "message" and mine.status != stored.status):
                setattr(merged, name, value)
    elif stored.completed_by and not merged.completed_by:
        for name in END_FIELDS:
            if getattr(merged, name) in (None, [], {}, False):
                setattr(merged, name, getattr(stored, name))
    elif not merged.run_status.terminal and stored.run_status == RunStatus.RUNNING \
            and merged.run_status in (RunStatus.QUEUED, RunStatus.PENDING, RunStatus.UNKNOWN):
        merged.status = stored.status  # the companion saw it start; a client's PENDING is older news
        merged.start_time = merged.start_time or stored.start_time
    elif merged.run_status == RunStatus.QUEUED and "admitted" in stored.timeline and not stored.run_status.terminal:
        merged.status = stored.status  # its keeper admitted it: a client's QUEUED is older news
    if len(stored.attempts) > len(merged.attempts):
        merged.attempts = stored.attempts  # the run side's account of its attempts, where this writer has fewer
    return merged


# ---------------------------------------------------------------------------------------------------------------
# One writer call: the record, then the index entry, then the notification


class RecordPort(Protocol):
    def update(self, change: Callable[[RunRecord | None], RunRecord | None]) -> RunRecord | None:
        """Read-modify-write of the run's record, conditional on the version read (None: nothing written)."""


class IndexPort(Protocol):
    def entry(self, record: RunRecord) -> None:
        """The team's index entry for the record as written (last writer wins: writing it again repairs)."""


@dataclass
class RunPorts:
    """Where one run's story is written (adapters: storage/run_ports.py)."""

    record: RecordPort
    index: IndexPort | None = None


def write(ports: RunPorts, transition: Callable[[RunRecord | None], RunRecord | None], *, indexed: bool = True,
          tell: Callable[[RunRecord], None] | None = None) -> RunRecord | None:
    """Apply ``transition`` to the stored record (conditional write), then (``indexed``: every status transition,
    never a heartbeat) the index entry, then (``tell``) the notification, whose claim marker makes it once. In this
    order, a crash between two steps leaves the record ahead of the index and the notification, never behind:
    the same call again (its transition is idempotent) writes the record unchanged, then the entry, then tells."""
    record = ports.record.update(transition)
    if record is None:
        return None
    if indexed and ports.index is not None:
        ports.index.entry(record)
    if tell is not None:
        tell(record)
    return record
