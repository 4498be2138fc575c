"""The ends a writer other than an attempt's companion records: a run given up (its supervisor), an end as a
client or a pipeline supervisor saw it (`Ended`), a pipeline's end from its steps' (`PipelineEnded`), a
pipeline's progress (`Progressed`), and a client's archive of an end it saw (`Archived`). Each a frozen
dataclass registered by `@rule` (rules.py), idempotent, refused with IllegalTransition where it may not happen."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model import RunStatus
from ..pipeline_status import overall
from ..record import RunRecord
from .rules import Writer, ended_by_run_side, rank, refuse, rule
from .timelines import stage

_CLIENTS = (Writer.FOLLOWER, Writer.ARCHIVE)


def _end(record: RunRecord, status: RunStatus, by: Writer, at: str) -> None:
    record.status = status.value
    record.end_time = record.end_time or at
    record.completed_by = by.recorded_as
    if by == Writer.PIPELINE_SUPERVISOR:
        record.archived = True  # a pipeline has no log of its own: its steps keep theirs
    stage(record, None, "ended", record.end_time)


@rule(leads_to="FAILED", writers=(Writer.SUPERVISOR, Writer.PIPELINE_SUPERVISOR),
      what="FAILED with why (its code is gone, or its supervisor died 4 times), told")
@dataclass(frozen=True)
class GaveUp:
    """The run ends FAILED though the rule would retry it (its code is gone, its supervisor kept dying): `why`
    becomes its message."""

    why: str
    at: str | None = None
    by: Writer = Writer.SUPERVISOR

    def change(self, record: RunRecord, at: str) -> None:
        if record.run_status in (RunStatus.SUCCEEDED, RunStatus.STOPPED):
            raise refuse(record, "gave_up", f"the run ended {record.status}")
        _end(record, RunStatus.FAILED, self.by, at)
        record.message = self.why
        record.updated_at = at


@rule(leads_to="ended", writers=(Writer.PIPELINE_SUPERVISOR, *_CLIENTS),
      what="the run ended `status` as this writer saw it (an end of a higher rank stands)")
@dataclass(frozen=True)
class Ended:
    """The run ended `status` as `by` saw it. An end a higher-ranked writer recorded stands (PRECEDENCE)."""

    status: RunStatus
    by: Writer
    at: str | None = None

    def change(self, record: RunRecord, at: str) -> None:
        if not self.status.terminal:
            raise refuse(record, f"ended({self.status.value})", "not an end")
        if record.run_status.terminal and rank(record.completed_by) > rank(self.by.recorded_as):
            raise refuse(record, f"ended({self.status.value}, {self.by.value})",
                         f"the {record.completed_by}'s end ({record.status}) stands")
        _end(record, self.status, self.by, at)


@rule(leads_to="ended", writers=(Writer.PIPELINE_SUPERVISOR,),
      what="the pipeline ended: its status from its steps' (each step's status), its one line")
@dataclass(frozen=True)
class PipelineEnded:
    """A pipeline's end from its steps: `carried` (step run id -> the status its supervisor saw; a recorded step
    it did not carry SUCCEEDED before: reused by --from, or run under this id already); the pipeline's status is
    theirs (core/pipeline_status.overall; a step never submitted: a stop between, STOPPED); `message` its line."""

    carried: Mapping[str, str | None]
    message: str | None = None
    at: str | None = None
    by: Writer = Writer.PIPELINE_SUPERVISOR

    def status(self, record: RunRecord) -> RunStatus:
        statuses = [s.get("status") for s in record.steps] if record.steps else list(self.carried.values())
        status = overall([RunStatus(s) if s in RunStatus.__members__ else None for s in statuses])
        return status if status.terminal else RunStatus.STOPPED

    def change(self, record: RunRecord, at: str) -> None:
        record.steps = [{**step, "status": self.carried.get(str(step.get("run_id")), RunStatus.SUCCEEDED.value)}
                        for step in record.steps or []]
        record.message = self.message or record.message
        Ended(self.status(record), self.by).change(record, at)


@rule(leads_to="PENDING, RUNNING", writers=(Writer.FOLLOWER, Writer.PIPELINE_SUPERVISOR),
      what="a pipeline's progress (RUNNING: its start); over an end only on a submit of the same id (`reopen`)")
@dataclass(frozen=True)
class Progressed:
    """A pipeline run's progress as the writer that advances its steps saw it (PENDING before its first step,
    RUNNING after, which is its start): never an end (`Ended` writes that), nor over one: an end stands, unless
    `reopen` (the same pipeline id submitted again goes on from the steps that succeeded) and it is of the
    writer's own rank."""

    status: RunStatus
    by: Writer = Writer.FOLLOWER
    reopen: bool = False
    at: str | None = None

    def change(self, record: RunRecord, at: str) -> None:
        if self.status.terminal:
            raise refuse(record, f"progressed({self.status.value})", "an end is written by Ended")
        if record.run_status.terminal and (not self.reopen or rank(record.completed_by) > rank(self.by.recorded_as)):
            raise refuse(record, f"progressed({self.status.value}, {self.by.value})",
                         f"the {record.completed_by or 'recorded'} end ({record.status}) stands")
        if record.run_status.terminal or record.completed_by:
            record.end_time = record.message = record.completed_by = None
            record.archived = False
            record.timeline.pop("ended", None)
            for stages in record.timelines.values():
                stages.pop("ended", None)
        record.status = self.status.value
        if self.status == RunStatus.RUNNING:
            record.start_time = record.start_time or at
        record.updated_at = at


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


@rule(leads_to="ended", writers=_CLIENTS,
      what="the end it saw and what it saved (logs, attempts, cost, metrics); the run side's end and log stand")
@dataclass(frozen=True)
class Archived:
    """A client saw the run end `status` (`message`) and saved its logs and final state (`saved`). An end the
    run side recorded stands, with its log (the archive fills only what it left empty); else the client's end is
    written (`Ended`). Either way the record is `archived`: no later look archives it again."""

    status: RunStatus
    saved: Archive = dataclasses.field(default_factory=Archive)
    message: str | None = None
    by: Writer = Writer.ARCHIVE
    at: str | None = None

    def change(self, record: RunRecord, at: str) -> None:
        if not self.status.terminal:
            raise refuse(record, f"archived({self.status.value})", "not an end")
        saved = self.saved
        if not ended_by_run_side(record):
            Ended(self.status, self.by).change(record, at)
            record.message = self.message
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
