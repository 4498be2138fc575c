"""A pipeline's steps in a team's queue (issue 44, item 6). The client prepares every step at submit (``prepared``:
its Jobs API body with its packages uploaded and kept in the queue's storage, its declared shape, the pipeline's
priority and its first enqueue time) and hands the bodies to the pipeline's supervisor; the supervisor, on the
cluster, enqueues each step only when the one before it has ended (``enqueue_step``), so the step waits for a slot
like any run, ahead of the runs that arrived after its pipeline. The key ``QUEUE_KEY`` of a step's body is this
module's: the keeper is given the body without it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .admission import Limits
from .client import AlreadyQueued, QueueRef, cancel, enqueue, ensure_keeper, keeper_alive, queued_request
from .format import Shape

QUEUE_KEY = "rtjob_queue"  # a queued step's body: where and how it is enqueued (never POSTed to Ray)


def prepared(backend: Any, ref: QueueRef, request: Any, shape: Shape, *, limits: Limits, record: dict[str, Any],
             user: str, job: str, priority: int, enqueued_at: float, pipeline_id: str) -> dict[str, Any]:
    """A step's body as its pipeline's supervisor enqueues it later (``record``: what the step's record keeps of
    its queue, core/record.py's ``queue``; ``backend``'s name: the record's, so a client reads the run's folder
    where it can)."""
    body = queued_request(backend, ref, request)
    body[QUEUE_KEY] = {"name": ref.name, "storage": ref.storage, "endpoint": ref.endpoint, "backend": backend.name,
                       "limits": dataclasses.asdict(limits), "record": record, "shape": shape.to_json(), "user": user,
                       "job": job, "priority": int(priority), "enqueued_at": float(enqueued_at),
                       "pipeline_id": pipeline_id}
    return body


def queued(step: dict[str, Any]) -> dict[str, Any] | None:
    """The step's queue entry as the client prepared it; None: the step is submitted straight to the cluster."""
    found = step.get(QUEUE_KEY)
    return found if isinstance(found, dict) else None


def ref_of(step: dict[str, Any]) -> QueueRef:
    q = queued(step) or {}
    return QueueRef(str(q["name"]), str(q["storage"]), q.get("endpoint") or None)


def enqueue_step(step: dict[str, Any]) -> bool:
    """The step into its queue now (the pipeline's priority and first enqueue time): True, or False when it was
    enqueued before (a replaced supervisor's second try)."""
    q = queued(step)
    assert q is not None
    request = {k: v for k, v in step.items() if k != QUEUE_KEY}
    try:
        enqueue(ref_of(step), str(step["submission_id"]), request, Shape.from_json(q.get("shape")),
                user=str(q.get("user") or "?"), job=str(q.get("job") or ""), priority=int(q.get("priority") or 0),
                enqueued_at=float(q["enqueued_at"]), pipeline_id=str(q.get("pipeline_id") or "") or None)
    except AlreadyQueued:
        return False
    return True


def cancel_step(step: dict[str, Any], by: str) -> None:
    cancel(ref_of(step), str(step["submission_id"]), by)


def keeper_for(step: dict[str, Any], backend: Callable[[], Any]) -> str | None:
    """The step's queue's keeper started on the cluster of ``backend()`` (made only then: a Jobs API client) when
    none holds the lease (its id; None: one is alive), with the queue's policy and caps; it reaches the queue's
    storage with this process's AWS variables. ``ensure_keeper`` reads the lease again: another carrier may have
    started one meanwhile."""
    ref = ref_of(step)
    if keeper_alive(ref):
        return None
    return ensure_keeper(backend(), ref, Limits(**dict((queued(step) or {}).get("limits") or {})))
