"""The supervisor's loop: it carries a run, or a pipeline (a sequence of runs, each carried as a run), on the
cluster with no rtjob client alive. It decides; the cluster's primitives (``ClusterJobs``, the backend's: on Ray,
backends/ray/in_cluster.py) read and act; every record write goes through the run side (``SupervisedRun``,
``SupervisedPipeline``: run_folder.py, pipeline_folder.py) as the lifecycle kernel's transition of the same name:
``beat``, ``retrying``, ``gave_up``; a pipeline's ``submitted``, ``ended``.

A run: its current attempt is polled; on an end the one retry rule (core/retry_rule.py, in the backend's terms:
``JobState.retry_reason``) with retries left submits the next attempt exactly once (the ids are deterministic: a
client follower and the supervisor both trying end with one submission and one attach). The stop marker is read
every STOP_POLL_S while an attempt runs and before and after each submit. It ends when the run's last attempt ends.

A pipeline: step i+1 is submitted (or, in a team's queue, enqueued: queued_step.py) only after step i SUCCEEDED
(``next_step``), each step carried as a run (attached to where it exists: a client may have submitted it first).

A supervisor whose run's (or pipeline's) supervisors kept dying (``ClusterJobs.given_up_line``: the replacement
rule's verdict) carries nothing: it stops what runs and gives up, FAILED with that line, told once.

Imports at module level: the stdlib, rtjob_contract and rtjob.core (the cluster runs it)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.errors import RtjobError, one_line
from ...core.lifecycle import ENDS
from ...core.retry_rule import retries_left
from .pipeline_rule import SUCCEEDED, exit_code, next_step

if TYPE_CHECKING:
    from ...backends.base import ClusterJobs, JobState
    from .queued_step import QueuedSteps

POLL_S, STOP_POLL_S = 1.0, 5.0
HEARTBEAT_S = float(os.environ.get(contract.ENV_COMPANION_HEARTBEAT_S) or 30)
PATIENCE_S = 300.0  # how long the cluster may fail to answer (a dashboard restarting) before it gives up on the run
STOP_WAIT_S = 60.0  # how long a supervisor that gives up waits for the attempt it stopped to end
TERMINAL = ENDS  # the kernel's ends, as the Jobs API spells them


@dataclass
class SupervisedRun:
    """What the loop writes through for a run (run_folder.RunFolder): each the kernel's transition of its name."""

    stop_requested: Callable[[], bool]  # the run's stop marker is there
    beat: Callable[[str | None], None]  # alive, carrying this attempt (None: the run has ended)
    say: Callable[[str], None]  # one line to its log
    # The run ends FAILED though the rule would retry it (its code is gone, its supervisor kept dying): why.
    gave_up: Callable[[str], None] = lambda line: None
    # It submitted a retry: (the failed attempt, why it is retried, its attempt number, the retry's id).
    retrying: Callable[[str, str, int, str], None] = lambda failed, reason, attempt, retry: None


@dataclass
class SupervisedPipeline:
    """What the loop writes through for a pipeline (pipeline_folder.PipelineFolder), and each step's run side."""

    stop_requested: Callable[[], bool]
    beat: Callable[[str | None], None]
    say: Callable[[str], None]
    step: Callable[[dict[str, Any]], SupervisedRun]  # a step (its request) carried as a run
    # {the step's run id: its status (None: never submitted)}, why → the pipeline's status as recorded
    ended: Callable[[dict[str, str | None], str | None], str | None]
    gave_up: Callable[[str], None] = lambda line: None  # its supervisor kept dying: FAILED, why
    # Its steps (their requests) as it starts: the pipeline's record begun where no client wrote it (a schedule's)
    submitted: Callable[[list[dict[str, Any]]], None] = lambda steps: None
    # Whether the step SUCCEEDED as its record says (a cluster that no longer knows it: a new one)
    succeeded_before: Callable[[dict[str, Any]], bool] = lambda step: False
    # The pipeline's end as a supervisor recorded it already (a restarted one has nothing to carry); None: not yet
    ended_before: Callable[[], str | None] = lambda: None
    queued: QueuedSteps | None = None  # its steps' team queue (queued_step.py); a step without one is sent at once


class Supervisor:
    """The loop, on the cluster's jobs ``jobs``."""

    def __init__(self, jobs: ClusterJobs) -> None:
        self.jobs = jobs
        self.submitted: list[str] = []  # retries and steps this supervisor created (not attached to)
        self._beaten = 0.0
        self._stop_read = 0.0  # when the stop marker was last read while an attempt ran
        self._stopping: str | None = None  # the attempt it stopped on the marker

    def _state(self, run_id: str, say: Callable[[str], None]) -> JobState | None:
        """The attempt now (None: the cluster does not know it); faults that may pass waited out for PATIENCE_S."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                return self.jobs.state(run_id)
            except RtjobError as exc:
                if time.monotonic() > deadline:
                    raise
                say(f"the Jobs API did not answer ({exc}); trying again")
                time.sleep(min(5.0, POLL_S * 5))

    def _status(self, run_id: str, say: Callable[[str], None]) -> str | None:
        return None if (state := self._state(run_id, say)) is None else state.status

    def _stop(self, run_id: str, say: Callable[[str], None], wait: bool = False) -> None:
        try:
            self.jobs.stop(run_id)
        except RtjobError as exc:
            say(f"could not stop {run_id}: {exc}")
        deadline = time.monotonic() + STOP_WAIT_S  # its companion writes the attempt's end first
        while wait and self._status(run_id, say) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def _beat(self, run: SupervisedRun, current: str | None, force: bool = False) -> None:
        if force or time.monotonic() - self._beaten >= HEARTBEAT_S:
            self._beaten = time.monotonic()
            try:
                run.beat(current)
            except Exception as exc:  # noqa: BLE001 - a record out of reach does not stop the run's retries
                run.say(f"heartbeat not recorded: {one_line(exc)}")

    # -- a run ----------------------------------------------------------------------------------------------------
    def carry_run(self, run_id: str, run: SupervisedRun, *, own: bool = True) -> int:
        """Carry the run ``run_id`` until its last attempt ends; ``own``: this supervisor is the run's own (a
        pipeline's step is carried by its pipeline's, whose replacements count instead)."""
        first = self._state(run_id, run.say)
        if first is None:
            run.say(f"no run {run_id} on this cluster: nothing to carry")
            return 2
        run_id = first.root
        current = self.jobs.latest_attempt(run_id)
        line = self.jobs.given_up_line(run_id, "run") if own else None
        if line is not None:
            return self._give_up_run(current, run, line)
        run.say(f"carrying {run_id} (attempt {current})")
        self._beaten, self._stop_read, self._stopping = 0.0, time.monotonic(), None
        self._beat(run, current, force=True)
        while True:
            state = self._state(current, run.say)
            if state is None:
                run.say(f"attempt {current} is gone from the cluster: nothing more to carry")
                self._beat(run, None, force=True)
                return 1
            if state.status not in TERMINAL:
                self._beat(run, current)
                self._stop_if_requested(current, run)
                time.sleep(POLL_S)
                continue
            after = self._retry(current, state, run)
            if after is None:
                run.say(f"{current} ended {state.status}: the run has ended")
                self._beat(run, None, force=True)
                return 0
            current = after
            self._beat(run, current, force=True)

    def _stop_if_requested(self, current: str, run: SupervisedRun) -> None:
        """The run's stop marker, read every STOP_POLL_S while an attempt runs: a stop that reached only storage
        (a client that cannot reach this cluster's Jobs API: a pipeline hosted as one Anyscale job) stops it."""
        if time.monotonic() - self._stop_read < STOP_POLL_S or self._stopping == current:
            return
        self._stop_read = time.monotonic()
        if run.stop_requested():
            self._stopping = current
            run.say(f"the run's stop was requested: stopping {current}")
            self._stop(current, run.say)

    def _retry(self, current: str, ended: JobState, run: SupervisedRun) -> str | None:
        """The attempt after ``current`` (``ended``: its state as just read): submitted (or attached to) when the
        rule retries it (the ``retrying`` transition, told by whoever created it); None when the run has ended."""
        if ended.retry_reason is None:
            return None
        reason, allowed, attempt = ended.retry_reason, ended.max_retries, ended.attempt
        if not retries_left(attempt, allowed):
            run.say(f"{current} FAILED: {reason}; no retries left (max_retries {allowed})")
            return None
        if run.stop_requested():
            run.say(f"{current} FAILED: {reason}; not retried: the run's stop was requested")
            return None
        missing = self.jobs.missing_code(current)
        if missing:
            line = f"cannot retry {current}: the cluster no longer has the run's code ({', '.join(missing)})"
            run.say(line)
            run.gave_up(line)
            return None
        retry, created = self.jobs.resubmit(current)
        if created:  # whoever submits a retry tells it (`notify: on: [retrying]`, once per retry)
            self.submitted.append(retry)
            run.retrying(current, reason, attempt, retry)
        run.say(f"{current} FAILED: {reason}; retry {attempt}/{allowed}: {'submitted' if created else 'attached to'} "
                f"{retry}")
        if run.stop_requested():  # the stop came while we submitted: what we started stops too
            run.say(f"the run's stop was requested: stopping {retry}")
            self._stop(retry, run.say)
        return retry

    def _give_up_run(self, current: str, run: SupervisedRun, line: str) -> int:
        """The run's supervisors kept dying: the attempt stopped (when it runs) and the run ``gave_up`` FAILED
        with ``line``, told once."""
        if self._status(current, run.say) not in TERMINAL:
            run.say(f"{line}; stopping {current}")
            self._stop(current, run.say, wait=True)
        if (status := self._status(current, run.say)) in (SUCCEEDED, "STOPPED"):
            run.say(f"{current} ended {status}: the run has ended")
            return 0
        run.say(line)
        run.gave_up(line)
        self._beat(run, None, force=True)
        return 1

    # -- a pipeline: its steps, each carried as a run --------------------------------------------------------------
    def carry_pipeline(self, pipeline_id: str, pipeline: SupervisedPipeline) -> int:
        """Carry the pipeline's steps (``ClusterJobs.steps``) in order, then record its end."""
        say, steps = pipeline.say, self.jobs.steps()
        ids = [self.jobs.step_id(step) for step in steps]
        ended = pipeline.ended_before()
        if ended is not None:  # a restarted supervisor (the platform's retry of the job hosting it): nothing to do
            say(f"pipeline {pipeline_id} ended {ended} already: nothing to carry")
            return exit_code(ended)
        statuses: list[str | None] = [None] * len(steps)
        for i, step in enumerate(steps):  # what already ran (an earlier supervisor, a client) is known first
            known = self.jobs.state(ids[i])
            if (known is not None and known.status == SUCCEEDED and self._final(ids[i]) == SUCCEEDED) or (
                    known is None and pipeline.succeeded_before(step)):
                statuses[i] = SUCCEEDED
        line = self.jobs.given_up_line(pipeline_id, "pipeline")
        if line is not None:
            return self._give_up_pipeline(pipeline, ids, statuses, line)
        say(f"carrying pipeline {pipeline_id}: {', '.join(ids)}")
        pipeline.submitted(steps)
        pipeline.beat(pipeline_id)
        why: str | None = None
        while (at := next_step(statuses, pipeline.stop_requested())) is not None:
            statuses[at], because = self._carry_step(f"step {at + 1}/{len(steps)}", steps[at], pipeline)
            why = why or because
        if pipeline.stop_requested():
            say("the pipeline's stop was requested: no later step is submitted")
        return exit_code(pipeline.ended(dict(zip(ids, statuses, strict=True)), why))

    def _final(self, step_id: str) -> str:
        """A step's outcome: its last attempt's status."""
        state = self.jobs.state(self.jobs.latest_attempt(step_id))
        return state.status if state is not None else "UNKNOWN"

    def _carry_step(self, where: str, step: dict[str, Any], pipeline: SupervisedPipeline) -> tuple[str, str | None]:
        """The step (``where``: "step 2/3") submitted (or attached to) and carried as a run; its status, and why the
        pipeline ends here when the step itself did not say."""
        step_id, say = self.jobs.step_id(step), pipeline.say
        if self.jobs.state(step_id) is None and pipeline.queued is not None and pipeline.queued.holds(step):
            run = pipeline.step(step)  # its queue's keeper sends it (and puts its code back): waited for here
            if (ended := pipeline.queued.wait(self.jobs, where, step, pipeline.stop_requested,
                                              lambda: self._beat(run, step_id))) is not None:
                return ended
        elif self.jobs.state(step_id) is None:
            missing = self.jobs.step_missing_code(step)
            if missing:
                line = f"cannot run step {step_id}: the cluster no longer has its code ({', '.join(missing)})"
                say(line)
                return "FAILED", line
            created = self.jobs.submit_step(step)
            if created:
                self.submitted.append(step_id)
            say(f"{where}: {'submitted' if created else 'attached to'} {step_id}")
            if pipeline.stop_requested():  # the stop came while it submitted: what it started stops too
                say(f"the pipeline's stop was requested: stopping {step_id}")
                self._stop(step_id, say)
                return "STOPPED", None
        else:
            say(f"{where}: attached to {step_id}")
        self.carry_run(step_id, pipeline.step(step), own=False)  # the step's retries, by the run's rule
        status = self._final(step_id)
        say(f"{where} {step_id} ended {status}")
        return status, None

    def _give_up_pipeline(self, pipeline: SupervisedPipeline, ids: list[str], statuses: list[str | None],
                          line: str) -> int:
        """The pipeline's supervisors kept dying: the step that runs is stopped and the pipeline ``gave_up``
        FAILED with ``line``, told once."""
        i = next_step(statuses, stop=False)
        if i is not None and self.jobs.state(ids[i]) is not None:
            current = self.jobs.latest_attempt(ids[i])
            if self._status(current, pipeline.say) not in TERMINAL:
                pipeline.say(f"{line}; stopping {current}")
                self._stop(current, pipeline.say, wait=True)
        pipeline.say(line)
        pipeline.gave_up(line)
        return exit_code("FAILED")
