"""Folding clients' intents into the queue's state (the keeper's part, pure: no I/O).

Intents are applied in the order they were written (their ``at``, then name): an enqueue adds a queued entry (a
run already in the state, or ended here before, is not added again); a cancel of a queued run removes it (it never
reaches Ray: "cancelled"), a cancel of an admitted run is handed back to be stopped on the cluster; a priority
change re-orders a queued run; hold and release pause and resume admission. A cancel written before an admission
wins: the keeper folds every intent it has listed before it admits.

Importable on the cluster: the stdlib only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .format import ADMITTED, QUEUED, Entry, Shape, State


@dataclass
class Folded:
    cancelled: list[str] = field(default_factory=list)  # queued runs removed: never reached Ray
    stop: list[str] = field(default_factory=list)  # admitted runs a cancel asks the keeper to stop on the cluster
    changed: bool = False


def intent_order(intent: dict[str, Any]) -> tuple[float, str]:
    return (float(intent.get("at") or 0.0), str(intent.get("_name") or ""))


def fold(state: State, intents: list[dict[str, Any]]) -> Folded:
    """Apply ``intents`` (each with its object name as ``_name``) not folded yet to ``state``, in place."""
    out = Folded()
    done = set(state.folded)
    ended = set(state.ended)
    for intent in sorted((i for i in intents if i.get("_name") not in done), key=intent_order):
        name = str(intent["_name"])
        kind = intent.get("kind")
        run = str(intent.get("run_id") or "")
        entry = state.find(run) if run else None
        if kind == "enqueue" and entry is None and run not in ended:
            state.entries.append(Entry(
                run_id=run, priority=int(intent.get("priority") or 0), user=str(intent.get("user") or ""),
                job=str(intent.get("job") or ""), enqueued_at=float(intent.get("enqueued_at") or intent.get("at") or 0),
                arrival=state.next_arrival, shape=Shape.from_json(intent.get("shape")), intent=name,
                pipeline_id=intent.get("pipeline_id") or None))
            state.next_arrival += 1
        elif kind == "cancel" and entry is not None:
            if entry.status == QUEUED:
                state.entries.remove(entry)
                state.ended.append(run)
                out.cancelled.append(run)
            elif entry.status == ADMITTED:
                out.stop.append(run)
        elif kind == "priority" and entry is not None and entry.status == QUEUED:
            entry.priority = int(intent.get("priority") or 0)
        elif kind in ("hold", "release"):
            state.held = kind == "hold"
        state.folded.append(name)
        out.changed = True
    return out
