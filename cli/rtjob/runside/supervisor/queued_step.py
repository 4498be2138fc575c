"""A pipeline's step that waits in a team's queue (issue 44, item 6), as its pipeline's supervisor carries it: when
the step before it has ended, the step is enqueued with the body its client prepared (queue/steps.py: the
pipeline's priority and first enqueue time, so it is ahead of runs that arrived after the pipeline), its record
QUEUED (the kernel's ``Submitted``, ``Queued``, by the pipeline supervisor), its queue's keeper made sure of; then
the supervisor waits until the keeper has sent it to the cluster (it then carries it as any step) or it ended while
queued (the keeper folded a cancel: the pipeline's stop, a user's `rtjob stop STEP`, or its code lost).

Imports at module level: the stdlib and rtjob_contract only (the cluster runs it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rtjob_contract as contract

from ...core.errors import one_line

if TYPE_CHECKING:
    from ...backends.base import ClusterJobs

POLL_S = 1.0  # the cluster's jobs read while the step waits (the keeper's pass is as often)
STORAGE_POLL_S = 5.0  # the stop marker and the step's record (a cancel folded), read as a running step's stop is
KEEPER_CHECK_S = 30.0  # how often a waiting step's keeper is looked for (a dead one is started again)


@dataclass
class QueuedSteps:
    """The queue's side of the pipeline's steps, written through the step's folder (its record) and the queue's
    intents; ``say``: the supervisor's log line."""

    say: Callable[[str], None]

    @staticmethod
    def holds(step: dict[str, Any]) -> bool:
        """Whether the step waits in a team's queue (its client prepared it so) rather than being sent at once."""
        from ...queue.steps import queued

        return queued(step) is not None

    def wait(self, jobs: ClusterJobs, where: str, step: dict[str, Any], stop_requested: Callable[[], bool],
             beat: Callable[[], None]) -> tuple[str, str | None] | None:
        """The step enqueued and waited for: None once its keeper has sent it to the cluster; else its status and
        why (STOPPED: cancelled while queued, by the pipeline's stop or by another's cancel)."""
        step_id = jobs.step_id(step)
        self.enqueue(step)
        cancelled, looked, read = False, time.monotonic(), 0.0
        while jobs.state(step_id) is None:
            if time.monotonic() - read >= STORAGE_POLL_S:  # its storage (the stop marker, its record) less often
                read = time.monotonic()
                if not cancelled and stop_requested():
                    self.say(f"the pipeline's stop was requested: cancelling {step_id} in its queue")
                    self.cancel(step)
                    cancelled = True
                line = self.ended_while_queued(step)
                if line is not None:
                    self.say(f"{where} {step_id}: {line}")
                    return "STOPPED", None if cancelled else line
            if time.monotonic() - looked >= KEEPER_CHECK_S:
                looked = time.monotonic()
                self.keeper(step)
            beat()
            time.sleep(POLL_S)
        if cancelled:  # admitted as its cancel was written: it stops on the cluster instead
            self.say(f"the pipeline's stop was requested: stopping {step_id}")
            jobs.stop(step_id)
            return "STOPPED", None
        self.say(f"{where}: {step_id} admitted by its queue's keeper")
        return None

    def enqueue(self, step: dict[str, Any]) -> None:
        from ...core import lifecycle
        from ...core.lifecycle import Writer
        from ...queue.steps import enqueue_step, queued
        from ...storage.run_ports import run_ports

        q, step_id = queued(step) or {}, str(step["submission_id"])
        created = enqueue_step(step)
        self.say(f"{step_id}: {'queued' if created else 'already queued'} in {q.get('name')} (priority "
                 f"{q.get('priority')}, waiting since its pipeline's submit)")
        env = dict((step.get("runtime_env") or {}).get("env_vars") or {})
        run_uri = env.get(contract.ENV_RUN_URI) or (step.get("metadata") or {}).get(contract.META_STORAGE)
        if run_uri:
            by = Writer.PIPELINE_SUPERVISOR
            try:  # QUEUED where it has no record yet; one already there (a replaced supervisor's) is left as it is
                lifecycle.write(run_ports(run_uri), [lifecycle.Submitted(by=by),
                                                     lifecycle.Queued(dict(q.get("record") or {}), by=by)],
                                new=lifecycle.blank(step_id, run_uri, env, backend=q.get("backend") or None),
                                only_if_missing=True)
            except Exception as exc:  # noqa: BLE001 - the queue holds it; its record says so when the keeper admits it
                self.say(f"{step_id}: its record not written QUEUED: {one_line(exc)}")
        self.keeper(step)

    def keeper(self, step: dict[str, Any]) -> None:
        """The step's queue's keeper started again where its lease lapsed (what a carrying command does)."""
        from ...backends.keepers import in_cluster_backend
        from ...queue.steps import keeper_for

        try:
            started = keeper_for(step, in_cluster_backend)
        except Exception as exc:  # noqa: BLE001 - a client's `wait` starts it too; the step waits meanwhile
            self.say(f"its queue's keeper not started: {one_line(exc)}")
            return
        if started:
            self.say(f"its queue's keeper was not running: started {started}")

    def ended_while_queued(self, step: dict[str, Any]) -> str | None:
        """The step's end while it never reached the cluster (its record's line), else None."""
        from ...storage.records import read_record

        meta = step.get("metadata") or {}
        try:
            record = read_record(str(meta.get(contract.META_STORAGE) or ""), meta.get(contract.META_STORAGE_ENDPOINT))
        except Exception as exc:  # noqa: BLE001 - unread: still waiting, as far as the supervisor knows
            self.say(f"{step['submission_id']}: its record not read: {one_line(exc)}")
            return None
        if record is None or not record.run_status.terminal:
            return None
        return record.message or f"{step['submission_id']} ended {record.status} while queued"

    def cancel(self, step: dict[str, Any]) -> None:
        from ...queue.steps import cancel_step

        cancel_step(step, "its pipeline's supervisor")
