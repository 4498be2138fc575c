"""A pipeline's supervisor, its run side: the pipeline run's folder (its stop marker, its record's heartbeat and end,
its one notification) and each step's folder (a retry's notice, a step that cannot be retried). The steps' order
and retries are the backend's (backends/ray/pipeline_supervisor.py).

Imports at module level: the stdlib and rtjob_contract only (the cluster runs it)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ..core.lifecycle import Writer
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

    def began(self, bodies: list[dict[str, Any]]) -> None:
        """The pipeline run's record, when no client wrote one (a run its schedule started): its steps' run ids and
        folders, as a client's submit records them."""
        if not self.run_uri:
            return
        from ..core import lifecycle
        from ..core.record import RunRecord
        from ..storage.run_ports import run_ports

        run_uri = self.run_uri

        def change(stored: RunRecord | None) -> RunRecord | None:
            if stored is not None:
                return None
            job = os.environ.get(contract.ENV_JOB_NAME) or None
            steps = [{"name": ((b.get("runtime_env") or {}).get("env_vars") or {}).get(contract.ENV_STEP_NAME),
                      "run_id": str(b["submission_id"]), "reused_from": None,
                      "storage_uri": (b.get("metadata") or {}).get(contract.META_STORAGE)} for b in bodies]
            return RunRecord(id=self.run_id, job=job, backend=os.environ.get(contract.ENV_BACKEND) or "unknown",
                             status="RUNNING", storage_uri=run_uri, job_file=bodies[0].get("job_file") if bodies
                             else None, spec={"pipeline": job, "steps": [s["name"] for s in steps]}, steps=steps,
                             start_time=_now(), updated_at=_now(), carried_by=WRITER, last_seen=_now())

        try:  # the record, then its index entry: the pipeline RUNNING in `rtjob runs --storage`
            lifecycle.write(run_ports(run_uri), change)
        except Exception as exc:  # noqa: BLE001 - its log says so; the steps' own records stand
            say(f"pipeline record not written: {getattr(exc, 'message', None) or type(exc).__name__}")

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
        from ..runs.pipelines.pipeline import overall

        def status_of(statuses: list[str | None]) -> RunStatus:
            status = overall([RunStatus(s) if s in RunStatus.__members__ else None for s in statuses])
            return status if status.terminal else RunStatus.STOPPED  # a step left unsubmitted: a stop between

        status = status_of(list(carried.values()))
        if self.run_uri:
            from ..core import lifecycle
            from ..storage.run_ports import run_ports
            from .outcome import message_for

            def change(stored: RunRecord | None) -> RunRecord | None:
                nonlocal status
                if stored is None:
                    return None
                stored.steps = [{**step, "status": carried.get(str(step.get("run_id")), RunStatus.SUCCEEDED.value)}
                                for step in stored.steps or []]
                status = status_of([step["status"] for step in stored.steps]) if stored.steps else status
                stored.message = line or self.why or stored.message
                stored.updated_at = _now()
                stored.archived = True
                lifecycle.beat(stored, Writer.PIPELINE_SUPERVISOR)
                # an end the run side wrote: a client's later write keeps it (lifecycle.PRECEDENCE)
                return lifecycle.ended(stored, status, Writer.PIPELINE_SUPERVISOR)

            try:  # the record, then the team's index entry (as a step's companion does), then its notification
                lifecycle.write(run_ports(self.run_uri), change, tell=lambda record: self.tell(message_for(record)))
            except Exception as exc:  # noqa: BLE001 - its log says so; the steps' own records stand
                say(f"pipeline record not updated: {getattr(exc, 'message', None) or type(exc).__name__}")
        say(f"pipeline {self.run_id} {status.value}")
        return status.value

    def hooks(self) -> PipelineHooks:
        from ..backends.base import PipelineHooks

        return PipelineHooks(stop_requested=self.stop_requested, beat=self.beat, say=say, for_step=self.for_step,
                             ended=self.ended, succeeded_before=self.succeeded_before, ended_before=self.ended_before,
                             began=self.began)


def take_run_id(env: MutableMapping[str, str], run_id: str) -> str | None:
    """A scheduled pipeline's run (RTJOB_PLANNED_ID: the id it was planned under): ``run_id``, its platform's job id,
    put in the planned id's place in its steps, their folders and its own (``env`` changed); its folder's URI."""
    planned = env.get(contract.ENV_PLANNED_ID)
    if planned and planned != run_id:
        for name in (contract.ENV_PIPELINE_STEPS, contract.ENV_RUN_URI, contract.ENV_PIPELINE_ID):
            if env.get(name):
                env[name] = env[name].replace(planned, run_id)
        say(f"scheduled run {run_id} of pipeline {env.get(contract.ENV_JOB_NAME)} (planned as {planned})")
    return env.get(contract.ENV_RUN_URI) or None


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
