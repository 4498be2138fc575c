"""A run's queue on Anyscale: Anyscale's own job queues (its control plane orders them), named in the queue's
settings (``anyscale_queue``, default the queue's name), the run's priority in Anyscale's order.

The rule: rtjob's priority is higher-first from PRIORITY_MIN to PRIORITY_MAX (default 0); Anyscale's is 0 = highest,
larger = lower (JobQueueConfig.priority, "0 (highest) to +inf"). rtjob's P becomes Anyscale's PRIORITY_MAX - P:
1000 → 0 (the highest), 0 → 1000, -1000 → 2000; the order is kept exactly, and a value outside rtjob's range is
refused (exit 2) rather than clipped. Only a queue of execution mode PRIORITY reads it (Anyscale's rule)."""

from __future__ import annotations

import json
from typing import Any

import rtjob_contract as contract

from ...core.errors import BadInput
from ...jobspec.queues import PRIORITY_MAX, PRIORITY_MIN, QueuePlan
from ..capabilities import JobQueues, QueuedRun
from .client import iso_time


def anyscale_priority(priority: int) -> int:
    """rtjob's ``priority`` (higher first) as Anyscale's (0 = highest): PRIORITY_MAX - priority."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise BadInput(f"priority {priority!r}: Anyscale takes rtjob priorities from {PRIORITY_MIN} to {PRIORITY_MAX} "
                       f"(mapped to its 0-is-highest order as {PRIORITY_MAX} - priority)")
    return PRIORITY_MAX - priority


def job_queue_config(queue: QueuePlan) -> dict[str, Any]:
    """The JobConfig's ``job_queue_config``: the Anyscale queue the run goes to and its priority there. The queue
    exists on Anyscale (created there with its execution mode and compute config); rtjob never creates one."""
    return {"target_job_queue_name": queue.settings.anyscale_queue or queue.name,
            "priority": anyscale_priority(queue.priority)}


class AnyscaleJobQueues(JobQueues):
    """`rtjob queue NAME` on Anyscale: the jobs the SDK lists with rtjob's queue tag (``rtjob-queue: NAME``), any
    user's (``include_all_users``), whose env names the queue too (RTJOB_TEAM_QUEUE), not ended, oldest first;
    Anyscale's order and admission are its own (the SDK gives no position)."""

    def __init__(self, backend: Any) -> None:  # the AnyscaleBackend that hands it out (backend.py imports this)
        self.backend = backend

    def runs(self, queue: str) -> list[QueuedRun]:
        backend = self.backend
        with backend._errors(f"listing the jobs of queue {queue}"):  # noqa: SLF001 - this backend's own SDK access
            statuses = list(backend._sdk("job").list(  # noqa: SLF001
                tags_filter={contract.TAG_QUEUE: [queue]}, include_all_users=True, max_items=backend.list_limit))
        found = []
        for status in statuses:  # filtered again by its env (the SDK's JobStatus has no tags; its fake filters none)
            sent = _team_queue(dict(getattr(status.config, "env_vars", None) or {}))
            if sent.get("name") != queue:
                continue
            info = backend._info(status)  # noqa: SLF001
            if info.status.terminal:
                continue
            priority = sent.get("priority")
            found.append(QueuedRun(info, user=str(status.creator_id) if status.creator_id else None,
                                   priority=priority if isinstance(priority, int) else None,
                                   since=iso_time(status.created_at)))
        return sorted(found, key=lambda run: run.since or "")


def _team_queue(env: dict[str, str]) -> dict[str, Any]:
    """The queue rtjob sent a job to, as its env says it (RTJOB_TEAM_QUEUE: {name, priority}); {} if none."""
    try:
        found = json.loads(env.get(contract.ENV_TEAM_QUEUE) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
