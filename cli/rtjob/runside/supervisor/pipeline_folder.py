"""The pipeline run's folder as its supervisor sees it (its stop marker; its record's transitions, kernel values:
``Submitted`` and ``Progressed(RUNNING)`` where no client wrote it, ``Beat``, ``PipelineEnded`` from its steps'
statuses, ``GaveUp``; its one notification) and each
step's folder, written as a run's (run_folder.py). The steps' order and retries are the supervisor's loop's
(loop.py).

Imports at module level: the stdlib, rtjob_contract and the lifecycle kernel only (the cluster runs it)."""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.errors import one_line
from ...core.lifecycle import Writer
from .run_folder import WRITER, RunFolder, say

if TYPE_CHECKING:
    from ...core.record import RunRecord
    from .loop import SupervisedPipeline, SupervisedRun


class PipelineFolder(RunFolder):
    """The pipeline run's folder (RTJOB_RUN_URI of its supervisor)."""

    why: str | None = None  # a step's retry that could not be made: the pipeline's message too

    def step(self, body: dict[str, Any]) -> SupervisedRun:
        """A step (its Jobs API request) as a run its folder carries: its stop is its own or the pipeline's."""
        from .loop import SupervisedRun

        meta = body.get("metadata") or {}
        step = RunFolder(str(body["submission_id"]), meta.get(contract.META_STORAGE) or None)

        def gave_up(line: str) -> None:  # the step's record says why; so will the pipeline's
            self.why = line
            step.gave_up(line)

        return SupervisedRun(stop_requested=lambda: self.stop_requested() or step.stop_requested(), beat=self.beat,
                             say=say, gave_up=gave_up, retrying=step.retrying)

    def _change(self, transitions: list[Any], what: str, *, new: RunRecord | None = None,
                tell: Callable[[RunRecord], None] | None = None) -> None:
        """The pipeline's record changed by ``transitions`` (then its index entry, then ``tell``), or one line in
        its log. ``new``: the record made where none is stored, and only then (else a missing record stays so)."""
        if not self.run_uri:
            return
        from ...core import lifecycle
        from ...storage.run_ports import run_ports

        try:
            lifecycle.write(run_ports(self.run_uri), transitions, new=new, only_if_missing=new is not None,
                            tell=tell)
        except Exception as exc:  # noqa: BLE001 - its log says so; the steps' own records stand
            say(f"pipeline record not {what}: {one_line(exc)}")

    def submitted(self, bodies: list[dict[str, Any]]) -> None:
        """The pipeline run's record, when no client wrote one (a run its schedule started): its steps' run ids and
        folders, as a client's submit records them; RUNNING (``Progressed``: its start), carried by this
        supervisor."""
        from ...core import lifecycle
        from ...core.model import RunStatus

        steps = [{"name": ((b.get("runtime_env") or {}).get("env_vars") or {}).get(contract.ENV_STEP_NAME),
                  "run_id": str(b["submission_id"]), "reused_from": None,
                  "storage_uri": (b.get("metadata") or {}).get(contract.META_STORAGE)} for b in bodies]
        new = lifecycle.blank(self.run_id, self.run_uri, os.environ, steps=steps,
                              job_file=bodies[0].get("job_file") if bodies else None,
                              spec={"pipeline": os.environ.get(contract.ENV_JOB_NAME) or None,
                                    "steps": [s["name"] for s in steps]})
        by = Writer.PIPELINE_SUPERVISOR
        # the record, then its index entry: RUNNING in `rtjob runs --storage`
        self._change([lifecycle.Submitted(by=by), lifecycle.Progressed(RunStatus.RUNNING, by), lifecycle.Beat(by)],
                     "written", new=new)

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
        """The pipeline run's record ended (``PipelineEnded``: its status from its steps', each step's status), then
        its one notification (claimed through the pipeline folder's rtjob-notified-<outcome> marker). A recorded
        step it did not carry had SUCCEEDED before (reused by --from, or run under this id already)."""
        from ...core import lifecycle
        from ..outcome import message_for

        by = Writer.PIPELINE_SUPERVISOR
        end = lifecycle.PipelineEnded(carried, line or self.why)
        told: list[str] = []

        def tell(record: RunRecord) -> None:
            told.append(record.status)
            self.tell(message_for(record))

        # the record, then the team's index entry (as a step's companion does), then its notification; an end the
        # run side wrote: a client's later write keeps it (lifecycle.PRECEDENCE)
        self._change([lifecycle.Beat(by), end], "updated", tell=tell)
        status = told[0] if told else end.status(lifecycle.blank(self.run_id, None, {})).value
        say(f"pipeline {self.run_id} {status}")
        return status

    def gave_up(self, line: str) -> None:
        """The pipeline ends FAILED with ``line`` (its supervisor kept dying), then its one notification."""
        from ...core import lifecycle
        from ..outcome import message_for

        by = Writer.PIPELINE_SUPERVISOR
        self._change([lifecycle.Beat(by), lifecycle.GaveUp(line, by=by)], "updated",
                     tell=lambda record: self.tell(message_for(record)))
        say(f"pipeline {self.run_id} FAILED")

    def supervised_pipeline(self) -> SupervisedPipeline:
        """What the supervisor's loop writes through when it carries the pipeline (loop.py)."""
        from .loop import SupervisedPipeline
        from .queued_step import QueuedSteps

        return SupervisedPipeline(stop_requested=self.stop_requested, beat=self.beat, say=say, step=self.step,
                                  ended=self.ended, gave_up=self.gave_up, submitted=self.submitted,
                                  succeeded_before=self.succeeded_before, ended_before=self.ended_before,
                                  queued=QueuedSteps(say))


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
    from ...storage.records import read_record

    try:
        return read_record(run_uri, None)
    except Exception as exc:  # noqa: BLE001 - unread is unknown: the step is carried as if it had not run
        say(f"record of {run_uri} not readable: {one_line(exc)}")
        return None
