"""The lifecycle's vocabulary: who writes a run's record (``Writer``), whose end stands (``PRECEDENCE``), and the
table of transitions (``TABLE``: each transition's type, the writers that may hand it in, the state it leads to),
with the one ``apply`` that runs a transition over a record. The transitions themselves (frozen dataclasses, one
``@rule`` each) are in transitions.py and ends.py.

Adding a state's transitions is one entry each: a frozen dataclass with a ``by: Writer`` field (who hands it in)
and a ``change(self, record, at)`` method, under ``@rule(leads_to=..., writers=(...), what=...)``; ``apply``
refuses it from any writer the entry does not name, and the states × writers table in docs/ARCHITECTURE.md is
generated from ``TABLE`` (tools/gen_reference.py, ``table_markdown``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

import rtjob_contract as contract

from .. import clock
from ..errors import RtjobError
from ..model import RunStatus
from ..record import RunRecord

# What a run's end sets in its record (an earlier attempt's end cleared: ``reopen``; whose end stands: kernel.merge).
END_FIELDS = ("status", "message", "exit_code", "end_time", "cost", "metrics", "logs", "log_home",
              "archived", "completed_by", "companion_cpu_s", "steps", "sync_notes", "outputs")  # steps: a pipeline's
ENDS = frozenset(s.value for s in RunStatus if s.terminal)
LATEST_LOG = f"{contract.RUN_LOGS_DIR}/{contract.DRIVER_LOG_FILE}"  # the latest attempt's whole log


class Writer(str, Enum):
    """Who writes a run's record. ``recorded_as`` is the name its record keeps (``carried_by``,
    ``completed_by``): the three names older records use too."""

    SUBMITTER = "submitter"  # the client that submitted the run
    FOLLOWER = "follower"  # a client that carries the run (submit, wait, stop, status --repair)
    ARCHIVE = "archive"  # a client that saw the run end and saves its logs and final state
    COMPANION = "companion"  # the run's entrypoint wrapper, beside the driver, one per attempt
    SUPERVISOR = "supervisor"  # the run's supervisor on the cluster: its retries across attempts
    PIPELINE_SUPERVISOR = "pipeline supervisor"  # a pipeline's supervisor: its steps, in order
    KEEPER = "keeper"  # a queue's keeper on the cluster: admits a queued run, or ends it cancelled (core/queueing.py)

    @property
    def recorded_as(self) -> str:
        return _RECORDED_AS[self]


_RECORDED_AS = {Writer.SUBMITTER: "client", Writer.FOLLOWER: "client", Writer.ARCHIVE: "client",
                Writer.COMPANION: "companion", Writer.SUPERVISOR: "supervisor",
                Writer.PIPELINE_SUPERVISOR: "supervisor", Writer.KEEPER: "keeper"}
RUN_SIDE = (Writer.COMPANION, Writer.SUPERVISOR, Writer.PIPELINE_SUPERVISOR)

# Whose end stands: an end written by a higher rank is never replaced by a lower one's; between equals the later
# write stands (a retry's companion ends the run after its first attempt's did). The run side saw the end where the
# run was; a client saw it through the backend, later and from afar.
PRECEDENCE: dict[str | None, int] = {None: 0, "client": 1, "companion": 2, "supervisor": 2, "keeper": 2}


def rank(completed_by: str | None) -> int:
    """The precedence of an end written by ``completed_by`` (a name a record keeps; an unknown one: a client's)."""
    return PRECEDENCE.get(completed_by, 1)


def ended_by_run_side(record: RunRecord | None) -> bool:
    """Whether the record holds an end that the run side wrote (which no client replaces)."""
    return record is not None and rank(record.completed_by) >= rank(Writer.COMPANION.recorded_as)


class IllegalTransition(RtjobError):
    """A writer asked for a transition the lifecycle refuses (an internal error, never a run's end)."""


def refuse(record: RunRecord, what: str, why: str) -> IllegalTransition:
    return IllegalTransition(f"run {record.id}: {what} refused: {why}")


# ---------------------------------------------------------------------------------------------------------------
# The table


class Transition(Protocol):
    """A transition value: who hands it in (``by``), when (``at``; None: when it is applied), and its change."""

    @property
    def by(self) -> Writer: ...

    @property
    def at(self) -> str | None: ...

    def change(self, record: RunRecord, at: str) -> None: ...


@dataclass(frozen=True)
class Rule:
    """One row of the table: a transition's type, the state it leads to (a RunStatus value, "ended" for any end,
    or "any": no status change), the writers that may hand it in, and what it does in a few words."""

    kind: type
    leads_to: str
    writers: tuple[Writer, ...]
    what: str

    @property
    def name(self) -> str:
        return self.kind.__name__


TABLE: dict[type, Rule] = {}
T = TypeVar("T")


def rule(*, leads_to: str, writers: tuple[Writer, ...], what: str) -> Callable[[type[T]], type[T]]:
    """Registers a transition type in ``TABLE`` (its row of the states × writers table)."""
    def register(kind: type[T]) -> type[T]:
        TABLE[kind] = Rule(kind, leads_to, writers, what)
        return kind

    return register


def apply(record: RunRecord, transition: Any) -> RunRecord:
    """``transition`` applied to ``record`` in place (and returned): refused (IllegalTransition) when its type is not
    in the table, when its writer may not hand it in, or when the record's state does not allow it."""
    entry = TABLE.get(type(transition))
    if entry is None:
        raise IllegalTransition(f"run {record.id}: {type(transition).__name__} is not a lifecycle transition")
    if transition.by not in entry.writers:
        raise refuse(record, entry.name, f"the {transition.by.value} does not write it")
    transition.change(record, transition.at or clock.now_iso())
    return record


# ---------------------------------------------------------------------------------------------------------------
# Helpers the transitions share


def attempt_of(record: RunRecord, attempt_id: str) -> dict[str, Any] | None:
    return next((a for a in record.attempts if isinstance(a, dict) and a.get("id") == attempt_id), None)


def later_attempt(record: RunRecord, number: int) -> str | None:
    """The id of an attempt after ``number`` the record already has (its end or start stands over this one's)."""
    return next((str(a.get("id")) for a in record.attempts if isinstance(a, dict)
                 and isinstance(a.get("attempt"), int) and a["attempt"] > number), None)


def set_attempt(record: RunRecord, attempt_id: str, number: int, status: str, code: int | None,
                reason: str | None) -> None:
    """The attempt in the record's attempts (Attempt.to_json()'s shape, in attempt order)."""
    entry = {"id": attempt_id, "attempt": number, "status": status, "exit_code": code, "retry_reason": reason}
    others = [a for a in record.attempts if isinstance(a, dict) and a.get("id") != attempt_id]
    record.attempts = sorted([*others, entry], key=lambda a: a.get("attempt") or 0)


def reopen(record: RunRecord) -> None:
    """An earlier attempt's end cleared: a next attempt is on its way (each attempt's own log stays listed)."""
    attempt_logs = [rel for rel in record.logs if rel != LATEST_LOG]
    for name in END_FIELDS:
        setattr(record, name, {"logs": [], "archived": False, "sync_notes": []}.get(name))
    record.logs = attempt_logs
