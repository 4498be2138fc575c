"""rtjob's Ray Train callback (RAY_TRAIN_CALLBACKS names it; train_phases.py says when): each start-up phase of a
Train run as an event line with its time, from the hook that defines it. Imported only by Ray Train, in the job's
environment, so it may import Ray's internals. A hook never raises: a phase that cannot be stamped is left out."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any

from ray.train.v2._internal.execution.callback import (
    ControllerCallback,
    ReportCallback,
    WorkerCallback,
    WorkerGroupCallback,
)

import rtjob_contract as contract

from .train_phases import say

PROCESS_GROUP_POLL_S = 0.02
PROCESS_GROUP_WAIT_S = 1800.0  # a worker whose process group never comes up (no torch backend) stops looking


class TrainPhases(ControllerCallback, WorkerGroupCallback, ReportCallback, WorkerCallback):
    """The controller's hooks run in the Train controller; WorkerCallback's in each worker (Ray copies it there)."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def _once(self, event: str) -> None:
        with contextlib.suppress(Exception):
            if event not in self._said:
                self._said.add(event)
                say(event)

    # the controller
    def after_controller_start(self, train_run_context: Any) -> None:
        self._once(contract.EVENT_TRAIN_CONTROLLER_STARTED)

    def before_init_train_context(self, workers: Any) -> dict[str, list[Any]]:
        self._once(contract.EVENT_WORKER_GROUP_STARTED)
        return {}

    def after_worker_group_training_start(self, worker_group: Any) -> None:
        self._once(contract.EVENT_TRAIN_FN_STARTED)

    def after_report(self, training_report: Any, metrics: Any) -> None:
        self._once(contract.EVENT_FIRST_REPORT)

    # each worker: rank 0 says when its torch process group is up (Ray's backend sets it up after this hook)
    def after_init_train_context(self) -> None:
        with contextlib.suppress(Exception):
            import ray.train

            if ray.train.get_context().get_world_rank() == 0:
                threading.Thread(target=self._watch_process_group, name="rtjob-process-group", daemon=True).start()

    def _watch_process_group(self) -> None:
        deadline = time.monotonic() + PROCESS_GROUP_WAIT_S
        while time.monotonic() < deadline:
            torch = sys.modules.get("torch")
            with contextlib.suppress(Exception):
                if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
                    self._once(contract.EVENT_PROCESS_GROUP_READY)
                    return
            time.sleep(PROCESS_GROUP_POLL_S)
