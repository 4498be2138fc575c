"""What a queue's keeper asks a growing cluster's autoscaler for. A queued run has not reached Ray, so nothing of it
is pending there and Ray's autoscaler would never add the nodes it waits for: the keeper asks for them (Ray's
request_resources), for the admitted runs and the first run short of resources, and withdraws the ask ([]) when
none is short or the queue is held. It is one standing request that sizes the whole cluster (each call replaces
the last; the keeper is its one caller), so the admitted runs' shapes are in it too. A pass that weighs nothing
(a run being placed, max_running) leaves it as it is: the run being placed asks Ray through its placement group.

Importable on the cluster: the stdlib only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .admission import Decision, Node
from .format import Entry, State
from .told import say


def ask(cluster: Any, asked: list[Node] | None, state: State, decision: Decision,
        admitted: Sequence[Entry]) -> list[Node] | None:
    """Ask ``cluster`` (ask_for) what this pass needs if it differs from ``asked``, the last ask; returns the ask
    that stands. The short run's line says it was asked for."""
    if not decision.judged and not state.held:
        return asked
    short = state.find(decision.short) if decision.short and not state.held else None
    bundles = [] if short is None else [b for e in (*admitted, short) for b in e.shape.bundles()]
    if bundles != asked:
        try:
            cluster.ask_for(bundles)
        except Exception as exc:  # noqa: BLE001 - admission goes on; the next pass asks again
            say(f"the autoscaler not asked for {len(bundles)} bundle(s): {type(exc).__name__}: {str(exc)[:300]}")
            return asked
    if short is not None:
        decision.reasons[short.run_id] += "; the autoscaler is asked for it"
    return bundles
