"""A run's queue on Anyscale: Anyscale's own job queues (its control plane orders them), named in the queue's
settings (``anyscale_queue``, default the queue's name), the run's priority in Anyscale's order.

The rule: rtjob's priority is higher-first from PRIORITY_MIN to PRIORITY_MAX (default 0); Anyscale's is 0 = highest,
larger = lower (JobQueueConfig.priority, "0 (highest) to +inf"). rtjob's P becomes Anyscale's PRIORITY_MAX - P:
1000 → 0 (the highest), 0 → 1000, -1000 → 2000; the order is kept exactly, and a value outside rtjob's range is
refused (exit 2) rather than clipped. Only a queue of execution mode PRIORITY reads it (Anyscale's rule)."""

from __future__ import annotations

from typing import Any

from ...core.errors import BadInput
from ...jobspec.queues import PRIORITY_MAX, PRIORITY_MIN, QueuePlan


def anyscale_priority(priority: int) -> int:
    """rtjob's ``priority`` (higher first) as Anyscale's (0 = highest): PRIORITY_MAX - priority."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise BadInput(f"priority {priority!r}: Anyscale takes rtjob priorities from {PRIORITY_MIN} to {PRIORITY_MAX} "
                       f"(mapped to its 0-is-highest order as {PRIORITY_MAX} - priority)")
    return PRIORITY_MAX - priority


def rtjob_priority(anyscale: int | None) -> int | None:
    """The inverse, for what Anyscale reports (None: it gave none)."""
    return None if anyscale is None else PRIORITY_MAX - anyscale


def job_queue_config(queue: QueuePlan) -> dict[str, Any]:
    """The JobConfig's ``job_queue_config``: the Anyscale queue the run goes to and its priority there. The queue
    exists on Anyscale (created there with its execution mode and compute config); rtjob never creates one."""
    return {"target_job_queue_name": queue.settings.anyscale_queue or queue.name,
            "priority": anyscale_priority(queue.priority)}

