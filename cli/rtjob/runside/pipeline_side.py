"""A pipeline's supervisor, its run side: the pipeline run's folder (its stop marker, its record's heartbeat and end,
its one notification) and each step's folder (a retry's notice, a step that cannot be retried). The steps' order
and retries are the backend's (backends/ray/pipeline_supervisor.py).

Imports at module level: the stdlib and rtjob_contract only (the cluster runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from .carrier_side import WRITER, RunSide, _now, say

if TYPE_CHECKING:
    from ..backends.base import CarryHooks, PipelineHooks


class PipelineSide(RunSide):
    """The pipeline run's folder (RTJOB_RUN_URI of its supervisor)."""

    why: str | None = None  # a step's retry that could not be made: the pipeline's message too

    def step_stop_requested(self, step: RunSide) -> bool:
        return self.stop_requested() or step.stop_requested()

    def for_step(self, body: dict[str, Any]) -> CarryHooks:
        from ..backends.base import CarryHooks

        meta = body.get("metadata") or {}
        step = RunSide(str(body["submission_id"]), meta.get(contract.META_STORAGE) or None)
        def gave_up(line: str) -> None:  # the step's record says why; so will the pipeline's
            self.why = line
            step.gave_up(line)

        return CarryHooks(stop_requested=lambda: self.step_stop_requested(step), beat=self.beat, say=say,
                          gave_up=gave_up, retried=step.retried)

    def succeeded_before(self, body: dict[str, Any]) -> bool:
        """Whether the step's record in storage says SUCCEEDED (a cluster that does not know the step: the
        platform restarted the job hosting this supervisor on a new one)."""
        record = _read((body.get("metadata") or {}).get(contract.META_STORAGE))
        return record is not None and record.status == "SUCCEEDED"

    def ended_before(self) -> str | None:
        """The pipeline's end, when a supervisor recorded it already (completed_by: supervisor)."""
        record = _read(self.run_uri)
        if record is None or record.completed_by != WRITER or not record.run_status.terminal:
            return None
        return record.status

    def ended(self, carried: dict[str, str | None], line: str | None) -> str:
        """The pipeline run's record ended (its status from its steps', each step's status), then its one
        notification (claimed through the pipeline folder's rtjob-notified-<outcome> marker). A recorded step it
        did not carry had SUCCEEDED before (reused by --from, or run under this id already)."""
        from ..core.model import RunStatus
        from ..core.record import RunRecord
        from ..runs.pipeline import overall

        def status_of(statuses: list[str | None]) -> RunStatus:
            status = overall([RunStatus(s) if s in RunStatus.__members__ else None for s in statuses])
            return status if status.terminal else RunStatus.STOPPED  # a step left unsubmitted: a stop between

        status = status_of(list(carried.values()))
        if self.run_uri:
            from ..storage.records import update_record

            def change(stored: RunRecord | None) -> RunRecord | None:
                nonlocal status
                if stored is None:
                    return None
                stored.steps = [{**step, "status": carried.get(str(step.get("run_id")), RunStatus.SUCCEEDED.value)}
                                for step in stored.steps or []]
                status = status_of([step["status"] for step in stored.steps]) if stored.steps else status
                stored.status = status.value
                stored.message = line or self.why or stored.message
                stored.end_time = stored.end_time or _now()
                stored.updated_at = _now()
                stored.carried_by, stored.last_seen, stored.archived = WRITER, _now(), True
                stored.completed_by = WRITER  # an end the run side wrote: a client's later write keeps it
                return stored

            try:
                record = update_record(self.run_uri, None, change)
            except Exception as exc:  # noqa: BLE001 - its log says so; the steps' own records stand
                say(f"pipeline record not updated: {getattr(exc, 'message', None) or type(exc).__name__}")
                record = None
            if record is not None:
                from .outcome import message_for

                self.tell(message_for(record))
        say(f"pipeline {self.run_id} {status.value}")
        return status.value

    def hooks(self) -> PipelineHooks:
        from ..backends.base import PipelineHooks

        return PipelineHooks(stop_requested=self.stop_requested, beat=self.beat, say=say, for_step=self.for_step,
                             ended=self.ended, succeeded_before=self.succeeded_before, ended_before=self.ended_before)


def _read(run_uri: str | None) -> Any:
    """The run's record in storage (a RunRecord), or None: no folder, no record, or out of reach now (one line)."""
    if not run_uri:
        return None
    from ..storage.records import read_record

    try:
        return read_record(run_uri, None)
    except Exception as exc:  # noqa: BLE001 - unread is unknown: the step is carried as if it had not run
        say(f"record of {run_uri} not readable: {getattr(exc, 'message', None) or type(exc).__name__}")
        return None
