"""The supervisor's loop: one Ray job on the cluster (supervisor_jobs.py: its ids and requests) that carries a run,
or a pipeline (a sequence of runs, each carried as a run), with no rtjob client alive. Its process is
``python -m rtjob.runside.supervisor`` (the run side it writes through: runside/supervisor/); ``Backend.carry``
reaches this loop through the registry.

A run: it polls the run's current attempt through the cluster's own Jobs API and applies the one retry rule
(core/retry_rule.py, in a Ray job's terms: retries.py): a retriable end with retries left submits
``<root>-retry<N>`` exactly once (the ids are deterministic and Ray refuses a second job with one: a client follower
and the supervisor both trying end with one submission and one attach). The stop marker is read every STOP_POLL_S
while an attempt runs and before and after each submit. It ends when the run's last attempt ends.

A pipeline: step i+1 is submitted only after step i SUCCEEDED (``next_step``), each step carried as a run; a step
that exists is attached to (a client may have submitted it first).

Its record writes are the lifecycle kernel's transitions, named as the hooks it calls: ``beat``, ``retrying``,
``gave_up``, ``submitted`` and ``ended`` (a pipeline's). The supervisor numbered GIVING_UP (its run's or pipeline's
supervisor died MAX_REPLACEMENTS times after the first) carries nothing: it stops what runs and gives up.

Imports at module level: the stdlib, rtjob_contract and requests (the cluster runs it)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import rtjob_contract as contract

from ...core.errors import RtjobError, one_line
from ...core.model import SubmitResult
from ...core.retry_rule import retries_left
from ..base import SupervisedPipeline, SupervisedRun
from .client import RayJobsAPI
from .request import RayJobRequest
from .retries import RayRetries, attempt_of, max_retries_of, retry_reason, root_id
from .supervisor_jobs import (
    TERMINAL,
    given_up_line,
    gives_up,
    latest_supervisor,
    missing_packages,
    step_request,
    submit_over_rest,
    upload_packages,
)

POLL_S = 1.0
STOP_POLL_S = 5.0
HEARTBEAT_S = float(os.environ.get(contract.ENV_COMPANION_HEARTBEAT_S) or 30)
PATIENCE_S = 300.0  # how long the Jobs API may fail to answer (a dashboard restarting) before it gives up on the run
STOP_WAIT_S = 60.0  # how long a supervisor that gives up waits for the attempt it stopped to end
SUCCEEDED = "SUCCEEDED"


def next_step(statuses: list[str | None], stop: bool) -> int | None:
    """A pipeline's rule, pure: the index of the step to carry now (submit or attach to), or None when the pipeline
    has ended (a step that did not succeed, a stop, or all steps SUCCEEDED). A step still running is carried on."""
    if stop:
        return None
    for i, status in enumerate(statuses):
        if status == SUCCEEDED:
            continue
        return i if status in (None, "PENDING", "RUNNING") else None
    return None


class Supervisor:
    """The loop, on the Jobs API ``api``; ``submit`` sends a request (attaching to an id that exists)."""

    def __init__(self, api: RayJobsAPI, submit: Callable[[RayJobRequest], SubmitResult] | None = None) -> None:
        self.api = api
        self.submit = submit or (lambda request: submit_over_rest(api, request))
        self.retries = RayRetries(api, self.submit)
        self.submitted: list[str] = []  # retries and steps this supervisor created (not attached to)
        self._beaten = 0.0
        self._stop_read = 0.0  # when the stop marker was last read while an attempt ran
        self._stopping: str | None = None  # the attempt it stopped on the marker
        self._code: dict[str, Any] | None = None  # its own code, uploaded (STEP_CODE_OF_SUPERVISOR)

    def _job(self, run_id: str, say: Callable[[str], None]) -> dict[str, Any] | None:
        """The attempt as the Jobs API has it; faults that may pass are waited out for PATIENCE_S."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                return self.api.job(run_id)
            except RtjobError as exc:
                if time.monotonic() > deadline:
                    raise
                say(f"the Jobs API did not answer ({exc}); trying again")
                time.sleep(min(5.0, POLL_S * 5))

    def _status(self, run_id: str, say: Callable[[str], None]) -> str:
        return str((self._job(run_id, say) or {}).get("status"))

    def _latest_attempt(self, run_id: str) -> str:
        """The run's latest attempt (a client follower, or an earlier supervisor, may have retried it already)."""
        chain = self.retries.chain_of(run_id)
        return chain[-1].id if chain else run_id

    def _stop(self, run_id: str, say: Callable[[str], None], wait: bool = False) -> None:
        try:
            self.api.stop(run_id)
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
        pipeline's step is carried by its pipeline's, whose number counts instead)."""
        first = self._job(run_id, run.say)
        if first is None:
            run.say(f"no run {run_id} on this cluster: nothing to carry")
            return 2
        run_id = root_id(run_id, first)
        current = self._latest_attempt(run_id)
        n = latest_supervisor(self.api, run_id)[0] if own else 0
        if gives_up(n):
            return self._give_up_run(run_id, current, run, given_up_line(run_id, n))
        run.say(f"carrying {run_id} (attempt {current})")
        self._beaten, self._stop_read, self._stopping = 0.0, time.monotonic(), None
        self._beat(run, current, force=True)
        while True:
            data = self._job(current, run.say)
            if data is None:
                run.say(f"attempt {current} is gone from the cluster: nothing more to carry")
                self._beat(run, None, force=True)
                return 1
            status = str(data.get("status"))
            if status not in TERMINAL:
                self._beat(run, current)
                self._stop_if_requested(current, run)
                time.sleep(POLL_S)
                continue
            after = self._retry(current, data, run)
            if after is None:
                run.say(f"{current} ended {status}: the run has ended")
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

    def _retry(self, current: str, data: dict[str, Any], run: SupervisedRun) -> str | None:
        """The attempt after ``current``, which ended as ``data`` says: submitted (or attached to) when the rule
        retries it (the ``retrying`` transition, told by whoever created it); None when the run has ended."""
        reason, allowed, attempt = retry_reason(data), max_retries_of(data), attempt_of(data)
        if reason is None or not retries_left(attempt, allowed):
            if reason is not None:
                run.say(f"{current} FAILED: {reason}; no retries left (max_retries {allowed})")
            return None
        if run.stop_requested():
            run.say(f"{current} FAILED: {reason}; not retried: the run's stop was requested")
            return None
        missing = missing_packages(self.api, dict(data.get("runtime_env") or {}))
        if missing:
            line = f"cannot retry {current}: the cluster no longer has the run's code ({', '.join(missing)})"
            run.say(line)
            run.gave_up(line)
            return None
        info, created = self.retries.resubmit(data, attempt + 1)
        if created:  # whoever submits a retry tells it (`notify: on: [retrying]`, once per retry)
            self.submitted.append(info.id)
            run.retrying(current, reason, attempt, info.id)
        run.say(f"{current} FAILED: {reason}; retry {attempt}/{allowed}: "
                f"{'submitted' if created else 'attached to'} {info.id}")
        if run.stop_requested():  # the stop came while we submitted: what we started stops too
            run.say(f"the run's stop was requested: stopping {info.id}")
            self._stop(info.id, run.say)
        return info.id

    def _give_up_run(self, run_id: str, current: str, run: SupervisedRun, line: str) -> int:
        """Its run's supervisor died MAX_REPLACEMENTS times after the first: the attempt stopped (when it runs) and
        the run ``gave_up`` FAILED with ``line``, told once."""
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
    def carry_pipeline(self, pipeline_id: str, bodies: list[dict[str, Any]], pipeline: SupervisedPipeline) -> int:
        """Carry the pipeline's steps (their Jobs API requests, ``bodies``) in order, then record its end."""
        say, ids = pipeline.say, [str(b["submission_id"]) for b in bodies]
        ended = pipeline.ended_before()
        if ended is not None:  # a restarted supervisor (the platform's retry of the job hosting it): nothing to do
            say(f"pipeline {pipeline_id} ended {ended} already: nothing to carry")
            return _exit_code(ended)
        statuses: list[str | None] = [None] * len(bodies)
        for i, body in enumerate(bodies):  # what already ran (an earlier supervisor, a client) is known first
            data = self.api.job(ids[i])
            if (data is not None and str(data.get("status")) == SUCCEEDED and self._final(ids[i]) == SUCCEEDED) or (
                    data is None and pipeline.succeeded_before(body)):
                statuses[i] = SUCCEEDED
        n = latest_supervisor(self.api, pipeline_id)[0]
        if gives_up(n):
            return self._give_up_pipeline(pipeline, ids, statuses, given_up_line(pipeline_id, n, "pipeline"))
        say(f"carrying pipeline {pipeline_id}: {', '.join(ids)}")
        pipeline.submitted(bodies)
        pipeline.beat(pipeline_id)
        why: str | None = None
        while (step := next_step(statuses, pipeline.stop_requested())) is not None:
            statuses[step], line = self._carry_step(f"step {step + 1}/{len(bodies)}", bodies[step], pipeline)
            why = why or line
        if pipeline.stop_requested():
            say("the pipeline's stop was requested: no later step is submitted")
        return _exit_code(pipeline.ended(dict(zip(ids, statuses, strict=True)), why))

    def _final(self, step_id: str) -> str:
        """A step's outcome: its last attempt's status."""
        return str((self.api.job(self._latest_attempt(step_id)) or {}).get("status") or "UNKNOWN")

    def _carry_step(self, where: str, body: dict[str, Any], pipeline: SupervisedPipeline) -> tuple[str, str | None]:
        """The step (``where``: "step 2/3") submitted (or attached to) and carried as a run; its status, and why the
        pipeline ends here when the step itself did not say."""
        step_id, say = str(body["submission_id"]), pipeline.say
        if self.api.job(step_id) is None:
            missing = missing_packages(self.api, body.get("runtime_env") or {})
            if missing:
                line = f"cannot run step {step_id}: the cluster no longer has its code ({', '.join(missing)})"
                say(line)
                return "FAILED", line
            created = self.submit(self._with_code(step_request(body), body)).created
            if created:
                self.submitted.append(step_id)
            say(f"{where}: {'submitted' if created else 'attached to'} {step_id}")
            if pipeline.stop_requested():  # the stop came while it submitted: what it started stops too
                say(f"the pipeline's stop was requested: stopping {step_id}")
                self._stop(step_id, say)
                return "STOPPED", None
        else:
            say(f"{where}: attached to {step_id}")
        self.carry_run(step_id, pipeline.step(body), own=False)  # the step's retries, by the run's rule
        status = self._final(step_id)
        say(f"{where} {step_id} ended {status}")
        return status, None

    def _with_code(self, request: RayJobRequest, body: dict[str, Any]) -> RayJobRequest:
        """A step that runs the supervisor's own code (STEP_CODE_OF_SUPERVISOR): its working dir and rtjob's
        modules, uploaded once by this process with Ray's own upload (the same content gives the same URI)."""
        if body.get("code") != contract.STEP_CODE_OF_SUPERVISOR:
            return request
        if self._code is None:
            from ..packaging import companion_modules

            local = dataclasses.replace(request, runtime_env={
                "working_dir": os.getcwd(), "py_modules": companion_modules(),
                "excludes": request.runtime_env.get("excludes") or []})
            self._code = upload_packages(self.api.address, self.api, local).runtime_env
        return dataclasses.replace(request, runtime_env={**request.runtime_env, **self._code})

    def _give_up_pipeline(self, pipeline: SupervisedPipeline, ids: list[str], statuses: list[str | None],
                          line: str) -> int:
        """Its pipeline's supervisor died MAX_REPLACEMENTS times after the first: the step that runs is stopped
        and the pipeline ``gave_up`` FAILED with ``line``, told once."""
        i = next_step(statuses, stop=False)
        if i is not None and self.api.job(ids[i]) is not None:
            current = self._latest_attempt(ids[i])
            if self._status(current, pipeline.say) not in TERMINAL:
                pipeline.say(f"{line}; stopping {current}")
                self._stop(current, pipeline.say, wait=True)
        pipeline.say(line)
        pipeline.gave_up(line)
        return _exit_code("FAILED")


def _exit_code(status: str | None) -> int:
    """0, except where the job hosting the supervisor shows the pipeline's outcome (RTJOB_SUPERVISOR_EXIT): on Ray
    a supervisor job that FAILED is one that died, and is replaced."""
    if os.environ.get(contract.ENV_SUPERVISOR_EXIT) != "outcome":
        return 0
    return 0 if status == SUCCEEDED else 1
