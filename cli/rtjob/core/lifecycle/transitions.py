"""The run side's transitions and the start of a run (a client's or the pipeline supervisor's submit), each a
frozen dataclass the writer hands to `lifecycle.write` (or `apply`), registered in the table by `@rule`.
Each is idempotent (applied twice, the record is the same) and raises IllegalTransition where it may not happen.
The ends a client or a pipeline supervisor writes are in ends.py."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import RunStatus
from ..record import RunRecord
from ..retry_rule import AttemptEnd, retry_reason
from .rules import (
    ENDS,
    RUN_SIDE,
    IllegalTransition,
    Writer,
    attempt_of,
    later_attempt,
    refuse,
    reopen,
    rule,
    set_attempt,
)
from .timelines import stage


@rule(leads_to="PENDING", writers=(Writer.SUBMITTER, Writer.FOLLOWER, Writer.PIPELINE_SUPERVISOR),
      what="the run submitted (`staged=False`: its record before it is sent, the storage check)")
@dataclass(frozen=True)
class Submitted:
    """A client submitted the run: PENDING (or what the backend already says), the first attempt's `submitted`.
    `staged=False`: the record a client writes before it sends the run (its storage check,
    runs/lifecycle/storage_check.py): PENDING under its planned id, the stage left to the submit that follows."""

    at: str | None = None
    staged: bool = True
    by: Writer = Writer.SUBMITTER

    def change(self, record: RunRecord, at: str) -> None:
        if record.run_status.terminal and not record.submitted_at:
            raise refuse(record, "submitted", f"the run has ended ({record.status})")
        record.submitted_at = record.submitted_at or at
        if record.run_status == RunStatus.UNKNOWN:
            record.status = RunStatus.PENDING.value
        if self.staged:
            stage(record, None, "submitted", at)


@rule(leads_to="any", writers=RUN_SIDE, what="alive: `last_seen`, who carries the run")
@dataclass(frozen=True)
class Beat:
    """The run side is alive: `last_seen`, and who carries the run (a supervisor carries it across attempts: a
    companion never takes that from it). Never a status change; legal in every state."""

    by: Writer
    at: str | None = None

    def change(self, record: RunRecord, at: str) -> None:
        if self.by != Writer.COMPANION or record.carried_by != Writer.SUPERVISOR.recorded_as:
            record.carried_by = self.by.recorded_as
        record.last_seen = record.updated_at = at


@rule(leads_to="RUNNING", writers=(Writer.COMPANION,), what="attempt n's driver started (its earlier end cleared)")
@dataclass(frozen=True)
class Started:
    """Attempt `number` (`attempt_id`) started: RUNNING. An earlier attempt's end is cleared (this one runs
    now); an attempt that already ended, or one older than an attempt the record has, never starts again."""

    attempt_id: str
    number: int
    at: str | None = None
    by: Writer = Writer.COMPANION

    def change(self, record: RunRecord, at: str) -> None:
        later = later_attempt(record, self.number)
        if later is not None:
            raise refuse(record, f"started({self.attempt_id})", f"a later attempt ({later}) is recorded")
        mine = attempt_of(record, self.attempt_id)
        if mine is not None and mine.get("status") in ENDS:
            raise refuse(record, f"started({self.attempt_id})", f"this attempt ended {mine['status']}")
        if record.run_status.terminal or record.completed_by:
            reopen(record)
        record.status = RunStatus.RUNNING.value
        record.start_time = record.start_time or at
        set_attempt(record, self.attempt_id, self.number, RunStatus.RUNNING.value, None, None)
        stage(record, self.attempt_id, "driver_started", at)
        Beat(self.by).change(record, at)


@rule(leads_to="any", writers=(Writer.COMPANION,), what="its attempt's start-up stages seen so far")
@dataclass(frozen=True)
class Stages:
    """Stages of attempt `attempt_id`'s timeline as its companion saw them (stage -> time); a stage that attempt
    noted already keeps its first time. Never a status change."""

    attempt_id: str
    stages: Mapping[str, str]
    at: str | None = None
    by: Writer = Writer.COMPANION

    def change(self, record: RunRecord, at: str) -> None:
        for name, when in self.stages.items():
            stage(record, self.attempt_id, name, when)


@rule(leads_to="ended", writers=(Writer.COMPANION,),
      what="attempt n ended (its verdict, the retry rule's reason, its CPU time, its sync's notes)")
@dataclass(frozen=True)
class AttemptEnded:
    """Attempt `number` ended (`end`: its verdict): the run's end for now (archived: the run side stores its
    log), the attempt's retry reason (the one retry rule) beside it. A later attempt's record stands over an older
    attempt's end. `cpu_s`, `sync_notes`: what its companion said of itself (None: not said)."""

    attempt_id: str
    number: int
    end: AttemptEnd
    message: str | None = None
    at: str | None = None
    by: Writer = Writer.COMPANION
    cpu_s: float | None = None
    sync_notes: tuple[str, ...] | None = None

    def change(self, record: RunRecord, at: str) -> None:
        what = f"attempt_ended({self.attempt_id})"
        if not RunStatus(self.end.status).terminal:
            raise refuse(record, what, f"{self.end.status} is not an end")
        later = later_attempt(record, self.number)
        if later is not None:
            raise refuse(record, what, f"a later attempt ({later}) is recorded")
        record.status, record.message, record.exit_code = self.end.status, self.message, self.end.exit_code
        record.end_time = at
        record.completed_by = self.by.recorded_as
        record.archived = True
        set_attempt(record, self.attempt_id, self.number, self.end.status, self.end.exit_code,
                    retry_reason(self.end))
        stage(record, self.attempt_id, "ended", at)
        record.start_time = record.start_time or record.timelines.get(self.attempt_id, {}).get("driver_started")
        if self.cpu_s is not None:
            record.companion_cpu_s = self.cpu_s
        if self.sync_notes is not None:
            record.sync_notes = list(self.sync_notes)


@rule(leads_to="any", writers=RUN_SIDE, what="logs it stored (listed), its metrics summary")
@dataclass(frozen=True)
class Saved:
    """Files the run side stored in the run's folder: `logs` listed (`log_home`: where they are), the metrics
    summary. Never a status change."""

    by: Writer
    logs: tuple[str, ...] = ()
    log_home: str | None = None
    metrics: Mapping[str, Any] | None = None
    at: str | None = None

    def change(self, record: RunRecord, at: str) -> None:
        if self.logs:
            record.logs = list(dict.fromkeys([*record.logs, *self.logs]))
            record.log_home = self.log_home or record.log_home
        record.metrics = dict(self.metrics) if self.metrics else record.metrics


@rule(leads_to="any", writers=(Writer.COMPANION,), what="where the run is mirrored (its MLflow run)")
@dataclass(frozen=True)
class Tracked:
    """Where the run is mirrored (runside/tracking/: ``{"mlflow": {run_id, url, unsent}, "at": ...}``). Never a
    status change."""

    tracking: Mapping[str, Any]
    at: str | None = None
    by: Writer = Writer.COMPANION

    def change(self, record: RunRecord, at: str) -> None:
        record.tracking = dict(self.tracking)


@rule(leads_to="ended", writers=(Writer.COMPANION,),
      what="its files stored (`complete`), or how many are not and where the node keeps them")
@dataclass(frozen=True)
class Outputs:
    """Whether the run's files reached its storage: written with its end by the companion (complete, or what the
    node keeps when the storage grace ran out), and by `rtjob sync` once it stored what was kept. Only after an end:
    a run is never called complete before it ended and its files are stored."""

    complete: bool
    not_stored: int = 0
    kept_at: str | None = None
    at: str | None = None
    by: Writer = Writer.COMPANION

    def change(self, record: RunRecord, at: str) -> None:
        if not record.run_status.terminal:
            raise refuse(record, "outputs", f"the run has not ended ({record.status})")
        record.outputs = ({"complete": True} if self.complete else
                          {"complete": False, "not_stored": self.not_stored, "kept_at": self.kept_at})
        record.updated_at = at


@rule(leads_to="PENDING", writers=(Writer.SUPERVISOR, Writer.FOLLOWER),
      what="retry n submitted: PENDING again, the failed attempt kept")
@dataclass(frozen=True)
class Retrying:
    """Retry `n` (attempt n + 1, `next_id`, its timeline's `submitted` now) was submitted after `failed_id`
    FAILED for `reason`: PENDING again, the failed attempt's end kept in its attempts. A run that SUCCEEDED or
    was STOPPED is never retried."""

    n: int
    reason: str
    failed_id: str
    next_id: str
    at: str | None = None
    by: Writer = Writer.SUPERVISOR

    def change(self, record: RunRecord, at: str) -> None:
        if record.run_status in (RunStatus.SUCCEEDED, RunStatus.STOPPED):
            raise refuse(record, f"retrying({self.n})", f"the run ended {record.status}")
        later = later_attempt(record, self.n + 1)
        if later is not None:
            raise refuse(record, f"retrying({self.n})", f"a later attempt ({later}) is recorded")
        failed = attempt_of(record, self.failed_id) or {}
        set_attempt(record, self.failed_id, self.n, RunStatus.FAILED.value, failed.get("exit_code"), self.reason)
        if attempt_of(record, self.next_id) is None:
            if record.run_status.terminal or record.completed_by:
                reopen(record)
            set_attempt(record, self.next_id, self.n + 1, RunStatus.PENDING.value, None, None)
            record.status = RunStatus.PENDING.value
            record.message = f"attempt {self.n} {self.reason}; attempt {self.n + 1} is {self.next_id}"
        stage(record, self.next_id, "submitted", at)
        record.updated_at = at


@rule(leads_to="ended", writers=(Writer.COMPANION,),
      what="the companion's end from its node's kept marker where the record lacks it (`rtjob sync`, `local down`)")
@dataclass(frozen=True)
class KeptEnd:
    """The companion's end as its node's kept marker says it (storage/kept.py), written where the record lacks it
    (its attempt open, or the run not ended; a later attempt's record stands over it), by the companion's rank:
    it is that companion's verdict. Then its outputs: ``complete`` once every kept file is stored, else how many
    are not and where the node keeps them (a record that says so already keeps its word)."""

    attempt_id: str
    number: int
    end: AttemptEnd | None
    message: str | None = None
    ended_at: str | None = None
    not_stored: int = 0
    kept_at: str | None = None
    complete: bool = False
    at: str | None = None
    by: Writer = Writer.COMPANION

    def change(self, record: RunRecord, at: str) -> None:
        recorded = attempt_of(record, self.attempt_id)
        attempt_open = recorded is None or str(recorded.get("status")) not in ENDS
        if self.end is not None and (attempt_open or not record.run_status.terminal):
            with contextlib.suppress(IllegalTransition):  # a later attempt's record stands over this end
                AttemptEnded(self.attempt_id, self.number, self.end, self.message, by=self.by).change(
                    record, self.ended_at or at)
        if not record.run_status.terminal:
            return
        if self.complete:
            Outputs(True).change(record, at)
        elif not (record.outputs or {}).get("kept_at"):
            Outputs(False, self.not_stored, self.kept_at).change(record, at)
