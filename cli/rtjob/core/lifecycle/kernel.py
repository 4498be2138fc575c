"""The one writer call (``write``: the record, then the index entry, then the notification), the record made where
none is stored (``blank``), two writers' versions of one record as one (``merge``) and the readers' verdicts
that are never written (``forgotten``; a stale run: ``RunRecord.stale_why``)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import rtjob_contract as contract

from .. import clock
from ..model import RunStatus, stamp
from ..record import RunRecord
from . import timelines
from .rules import END_FIELDS, TABLE, apply, rank


def blank(run_id: str, run_uri: str | None, env: Mapping[str, str] | None = None, *, job: str | None = None,
          backend: str | None = None, **fields: Any) -> RunRecord:
    """The record a run-side writer makes where the run's folder has none yet: the run's id, its job and backend
    (as given, else as its environment names them: RTJOB_JOB_NAME, RTJOB_BACKEND), its folder; ``fields`` besides
    (a pipeline's steps and spec)."""
    env = env or {}
    return RunRecord(id=run_id, job=job or env.get(contract.ENV_JOB_NAME) or None,
                     backend=backend or env.get(contract.ENV_BACKEND) or "unknown", storage_uri=run_uri, **fields)


class RecordPort(Protocol):
    def update(self, change: Callable[[RunRecord | None], RunRecord | None]) -> RunRecord | None:
        """Read-modify-write of the run's record, conditional on the version read (None: nothing written)."""


class IndexPort(Protocol):
    def entry(self, record: RunRecord) -> None:
        """The team's index entry for the record as written (last writer wins: writing it again repairs)."""


@dataclass
class RunPorts:
    """Where one run's story is written (adapters: storage/run_ports.py). ``cost``: the estimated cost of an
    ended run from its record (its rate, its times), asked by ``write`` after a run-side end (None: not priced)."""

    record: RecordPort
    index: IndexPort | None = None
    cost: Callable[[RunRecord], dict[str, Any] | None] | None = None


def write(ports: RunPorts, transitions: Any, *, new: RunRecord | None = None, mine: RunRecord | None = None,
          only_if_missing: bool = False, indexed: bool = True,
          tell: Callable[[RunRecord], None] | None = None) -> RunRecord | None:
    """``transitions`` (one value, or several in order) applied to the stored record (a conditional write), then
    (``indexed``: every status transition, never a heartbeat) the index entry, then (``tell``) the notification,
    whose claim marker makes it once. In this order, a crash between two steps leaves the record ahead of the index
    and the notification, never behind: the same call again (each transition is idempotent) writes the record
    unchanged, then the entry, then tells.

    The record they apply to: the stored one; ``mine`` (a client's whole record) merged over it (``merge``); where
    none is stored, ``new`` (``blank``), else nothing is written (None). ``only_if_missing``: a record that is
    stored already is left as it is (nothing written, None returned). An illegal transition raises IllegalTransition: nothing written."""
    steps: Sequence[Any] = transitions if isinstance(transitions, (list, tuple)) else [transitions]
    kept: list[RunRecord] = []  # a stored record left as it is (only_if_missing)

    def change(stored: RunRecord | None) -> RunRecord | None:
        kept.clear()
        if stored is not None and only_if_missing:
            kept.append(stored)
            return None
        if mine is not None:
            record = merge(copy.deepcopy(mine), stored)
        elif stored is not None:
            record = stored
        elif new is not None:
            record = copy.deepcopy(new)
        else:
            return None
        for transition in steps:
            apply(record, transition)
        timelines.derive(record)
        record.updated_at = clock.now_iso()
        if ports.cost is not None and record.run_status.terminal and any(
                TABLE[type(t)].leads_to == "ended" for t in steps):
            record.cost = ports.cost(record) or record.cost
        return record

    record = ports.record.update(change)
    if record is None or (kept and record is kept[0]):
        return None
    if indexed and ports.index is not None:
        ports.index.entry(record)
    if tell is not None:
        tell(record)
    return record


def _newer_tracking(mine: dict[str, Any] | None, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run side's latest note of where the run is mirrored (runside/tracking/: each carries its time)."""
    return max((t for t in (mine, stored) if t), key=lambda t: str(t.get("at") or ""), default=None)


def _per_attempt(record: RunRecord) -> dict[str, dict[str, str]]:
    if record.timelines:
        return record.timelines
    return {timelines.last_attempt(record): dict(record.timeline)} if record.timeline else {}


def merge(mine: RunRecord, stored: RunRecord | None) -> RunRecord:
    """``mine`` (a writer's whole record) to be written over ``stored`` (the version in storage): an end of a
    higher rank is never replaced (each end field it set stays; one it left empty this writer may fill), an end
    already written stays written, each attempt's timeline the union of both (within an attempt the earliest time
    of a stage; attempts never mixed), ``last_seen`` the latest, the run's start the earliest (a client's archive
    never moves the run side's), ``carried_by`` kept; a run-side status newer than mine (RUNNING over a client's
    PENDING) too."""
    if stored is None:
        return mine
    merged = dataclasses.replace(mine, timelines=timelines.merged(_per_attempt(mine), _per_attempt(stored)))
    merged.last_seen = max(filter(None, (mine.last_seen, stored.last_seen)), default=None)
    merged.carried_by = mine.carried_by or stored.carried_by
    merged.start_time = clock.earliest(mine.start_time, stored.start_time)  # whichever writer came last
    merged.tracking = _newer_tracking(mine.tracking, stored.tracking)
    if rank(stored.completed_by) > rank(mine.completed_by):
        for name in END_FIELDS:  # my message, written in another state than this end's, is not this end's words
            value = getattr(stored, name)
            if value not in (None, [], {}) or (name == "message" and mine.status != stored.status):
                setattr(merged, name, value)
    elif stored.completed_by and not merged.completed_by:
        for name in END_FIELDS:
            if getattr(merged, name) in (None, [], {}, False):
                setattr(merged, name, getattr(stored, name))
    elif not merged.run_status.terminal and stored.run_status == RunStatus.RUNNING \
            and merged.run_status in (RunStatus.QUEUED, RunStatus.PENDING, RunStatus.UNKNOWN):
        merged.status = stored.status  # the companion saw it start; a client's PENDING is older news
    elif merged.run_status == RunStatus.QUEUED and "admitted" in stored.timeline and not stored.run_status.terminal:
        merged.status = stored.status  # its keeper admitted it: a client's QUEUED is older news
    if len(stored.attempts) > len(merged.attempts):
        merged.attempts = stored.attempts  # the run side's account of its attempts, where this writer has fewer
    timelines.derive(merged)
    return merged


def forgotten(record: RunRecord) -> str | None:
    """The reader's verdict on a run its cluster no longer knows: why it is UNKNOWN (its end never recorded), or
    None when its record holds its end. Never written."""
    if record.run_status.terminal:
        return None
    return (f"its cluster no longer knows this run; last seen {record.status} at "
            f"{stamp(record.updated_at or record.submitted_at)}, its end was never recorded")
