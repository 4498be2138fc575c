"""Stopping a run, told apart from a kill: rtjob first writes the stop marker in the run's folder
(rtjob_contract.STOP_MARKER_FILE), then asks the backend to stop it. The run's companion, receiving the stop's
SIGTERM, finds the marker and records STOPPED; a SIGTERM without it (a node shutting down, someone's kill) is a
lost driver, which stays retriable. The marker is also what a supervisor checks before and after each submit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import rtjob_contract as contract

from ...core.clock import now_iso
from ...core.errors import RtjobError
from ...core.model import RunStatus

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo
    from ...core.record import RunRecord


def mark_stop(storage_uri: str | None, endpoint: str | None) -> bool:
    """The stop marker in the run's folder (True: written). A folder out of reach is not fatal: the stop goes on
    and the run's end reads as a SIGTERM kill."""
    if not storage_uri:
        return False
    from ...storage.opening import objects_for

    try:
        with objects_for(storage_uri, endpoint) as objects:
            objects.put(contract.STOP_MARKER_FILE, now_iso("microseconds").encode())
        return True
    except (RtjobError, OSError):
        return False


def stop_run(backend: Backend, run_id: str) -> RunInfo:
    """Mark the run's stop in its folder, then stop it (the backend returns at once for an ended run). A run still
    queued is cancelled instead: it never reaches the cluster (runs/queued.py)."""
    from ..places import writable_here
    from .queue_wait import cancelled_while_queued

    cancelled = cancelled_while_queued(backend, run_id)
    if cancelled is not None:
        return cancelled

    try:
        info = backend.status(run_id)
    except RtjobError:
        info = None
    if info is not None and not info.status.terminal and writable_here(backend.name, info.storage_uri):
        mark_stop(info.storage_uri, info.storage_endpoint)
    return backend.stop(run_id)


def stop_pipeline(backend: Backend, record: RunRecord, patience_s: float = 30.0) -> list[RunInfo]:
    """Stop a pipeline run: its stop marker first (its supervisor reads it before and after every submit: no
    retry, no later step, and what it submits as the marker appears it stops), then every attempt of its steps that
    has not ended; its supervisor then ends by itself, recording the pipeline STOPPED, and is stopped after
    ``patience_s`` if it has not. A supervisor stopped so never records the end (Anyscale may still be stopping
    its job): this client writes it, the kernel's ``ended`` STOPPED, unless an end is recorded by then. What was
    stopped, in that order."""
    import time

    mark_stop(record.storage_uri, record.storage_endpoint)
    stopped: list[RunInfo] = []
    for step in record.steps:
        step_id = str(step.get("run_id"))
        try:
            attempts = backend.attempts(step_id)
            ids = [a.id for a in attempts.chain if a.status not in ("SUCCEEDED", "FAILED", "STOPPED")] \
                if attempts is not None else [step_id]
            stopped.extend(info for info in (stop_run(backend, i) for i in ids) if info.status == RunStatus.STOPPED)
        except RtjobError:  # a step never submitted (or gone from the cluster): nothing to stop
            continue
    deadline = time.monotonic() + patience_s
    while (supervisor := backend.supervisor_of(record.id)) is not None and not supervisor.status.terminal:
        if time.monotonic() > deadline:
            stopped.append(backend.stop(supervisor.id))
            _record_stopped_by_client(record)
            break
        time.sleep(0.5)
    return stopped


def _record_stopped_by_client(record: RunRecord) -> None:
    """The pipeline's end, STOPPED, written by the client that stopped it (an end its supervisor wrote first
    stands: the kernel refuses this one then). Quietly: `stop` prints the pipeline's state after this."""
    from ...core import lifecycle
    from ...core.lifecycle import Writer
    from ..events import Quiet
    from ..memory import write

    write(record, lifecycle.Archived(RunStatus.STOPPED, lifecycle.Archive(),
                                     "stopped by rtjob stop: its supervisor did not end within the stop's wait",
                                     by=Writer.FOLLOWER), Quiet())
