"""A run's supervisor as a client sees it: on the cluster (alive, or when it was last seen), as `rtjob
status` shows it. The backend says whether the supervisor's job runs; the run's record in storage says when the
supervisor last wrote its heartbeat."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.errors import RtjobError
from ...core.model import RunStatus, stamp
from ..memory import stored

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...core.model import RunInfo


@dataclass
class SupervisorState:
    id: str  # the supervisor's own run id
    alive: bool
    status: str  # its job's status
    last_seen: str | None  # its last heartbeat in the run's record

    def to_json(self) -> dict[str, Any]:
        return {"supervisor": {"id": self.id, "alive": self.alive, "status": self.status, "last_seen": self.last_seen}}

    def describe(self) -> str:
        if self.alive:
            return "supervisor (alive)"
        seen = f"last seen {stamp(self.last_seen)}" if self.last_seen else "never seen"
        return f"supervisor ({self.status.lower()}, {seen})"


def supervisor_state(backend: Backend, info: RunInfo,
                     note: Callable[[str], None] | None = None) -> SupervisorState | None:
    """The run's supervisor, or None (it has none, or it cannot be read now: status goes on without it). With
    ``note``, a supervisor that died while the run still had something to carry is replaced first (its
    replacement's id is deterministic: two clients doing this start one), and ``note`` hears of it."""
    try:
        supervisor = before = backend.supervisor_of(info.id)
        # A run whose attempt SUCCEEDED or was STOPPED has nothing left to carry; a FAILED one may (a retry).
        if note is not None and (before is None or before.status.terminal) \
                and info.status not in (RunStatus.SUCCEEDED, RunStatus.STOPPED):
            supervisor = backend.supervise(info.id) or before
            if supervisor is not None and (before is None or supervisor.id != before.id):
                gone = f" ({before.id} is {before.status.value})" if before is not None else ""
                note(f"started supervisor {supervisor.id} to carry the run's retries{gone}")
    except RtjobError:
        return None
    if supervisor is None:
        return None
    record = stored(info)
    last_seen = record.last_seen if record is not None and record.carried_by == "supervisor" else None
    return SupervisorState(supervisor.id, not supervisor.status.terminal, supervisor.status.value, last_seen)
