"""The queue's keeper: one per queue, on the cluster (``python -m rtjob.queue.keeper KEEPER_ID``, a Ray job started
by ``ensure_keeper``), the only writer of the queue's state.

Each pass: renew the lease (lost: another keeper took over, stop); fold the intents it has not folded (a cancel
listed before an admission wins); submit what was admitted but not yet seen by Ray (a keeper killed between its
state write and its submit: the next one submits, and Ray's refusal of a second submission id makes that exactly
once); note which admitted runs are placed and which ended (a retry keeps its slot); admit at most one run by the
admission rule against the free resources per node minus what unplaced admitted runs declared; write the state
with If-Match. An admission is written to the state first, then submitted, then recorded in the run's record.

What it needs of the cluster is ``Cluster`` (backends/keepers.RayKeeperCluster on Ray; tests may give another
real one). Its queue and settings (policy, max_skips, caps) come in contract.ENV_QUEUE as JSON."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import rtjob_contract as contract

from ..storage.objects import Objects, PreconditionFailed
from . import autoscaler
from . import lease as leases
from .admission import Limits, Node, decide, place, positioned
from .fold import fold
from .format import (
    ADMITTED,
    CODE,
    INTENTS,
    INTENTS_FOLDER,
    LIMIT,
    STATE,
    Entry,
    State,
    intent_run,
    loads,
    now,
)
from .told import record_in_run, say

PLACE_TIMEOUT_S = 300.0  # an admitted run not placed by then releases the next admission (it still counts)
DATA_CPUS_DEFAULT = 0.0


class Cluster(Protocol):
    def free_per_node(self) -> list[Node]: ...
    def total_per_node(self) -> list[Node]: ...
    def grows(self) -> bool: ...
    def largest_per_node(self) -> tuple[list[Node], str] | None: ...
    def ask_for(self, bundles: list[Node]) -> None: ...
    def hold_sealed(self, queued: list[Entry], request_of: Callable[[str], dict[str, Any]]) -> None: ...
    def job(self, run_id: str) -> dict[str, Any] | None: ...
    def submit(self, body: dict[str, Any]) -> bool: ...
    def restore_code(self, body: dict[str, Any], fetch: Callable[[str], bytes | None]) -> list[str]: ...
    def placed(self, run_id: str, data: dict[str, Any], workers: int) -> str | None: ...
    def ended(self, run_id: str) -> bool: ...
    def stop(self, run_id: str) -> None: ...


class Keeper:
    def __init__(self, objects: Objects, name: str, cluster: Cluster, holder: str, limits: Limits,
                 record: Callable[[str, str, dict[str, Any]], None] | None = None) -> None:
        self.objects, self.name, self.cluster, self.holder, self.limits = objects, name, cluster, holder, limits
        self.record = record or record_in_run
        self.lease: leases.Lease | None = None
        self.last_beat = 0.0
        self.asked: list[Node] | None = None  # what it last asked the autoscaler for

    # -- the lease -----------------------------------------------------------------------------------
    def hold_lease(self) -> bool:
        """Take the lease, or renew it when due; False: another keeper holds it."""
        if self.lease is None:
            self.lease = leases.take(self.objects, self.holder)
        elif now() - self.last_beat >= leases.BEAT_S:
            self.lease = leases.renew(self.objects, self.lease)
        else:
            return True
        self.last_beat = now()
        return self.lease is not None

    # -- one pass ------------------------------------------------------------------------------------
    def read(self) -> tuple[State, str | None]:
        found = self.objects.get(STATE, LIMIT)
        return (State(self.name), None) if found is None else (State.from_bytes(found.data, self.name), found.etag)

    def write(self, state: State, etag: str | None) -> str:
        state.keeper, state.updated_at = self.holder, now()
        data = state.to_bytes()
        return self.objects.put(STATE, data, if_absent=True) if etag is None else \
            self.objects.put(STATE, data, if_match=etag)

    def intents(self, state: State) -> list[dict[str, Any]]:
        listed = {x.rel for x in self.objects.list(INTENTS_FOLDER)}
        state.folded = [n for n in state.folded if n in listed]  # deleted ones (runs that left) are forgotten
        about = {intent_run(n) for n in listed}
        state.ended = [r for r in state.ended if r in about]  # their intents are deleted: nothing can re-queue them
        out = []
        for rel in sorted(listed - set(state.folded)):
            found = self.objects.get(rel, LIMIT)
            if found is not None:
                out.append({**loads(found.data, rel), "_name": rel})
        return out

    def step(self) -> bool:
        """One pass; False when this keeper lost its lease."""
        if not self.hold_lease():
            return False
        state, etag = self.read()
        folded = fold(state, self.intents(state))
        for run in folded.cancelled:
            self.record(run, "cancelled", self.request_of(f"{INTENTS}enqueue-{run}.json"))
        for run in folded.stop:
            self.cluster.stop(run)
        self.carry_admitted(state)
        self.cluster.hold_sealed(state.queued(), self.request_of)  # what Ray may collect while they wait
        admitted = self.admit(state)
        try:
            etag = self.write(state, etag)
        except PreconditionFailed:
            return self.lease is not None  # another writer: read again next pass (a lost lease shows at renewal)
        self.forget_ended(state)
        if admitted is not None:
            self.submit(state, admitted)
        return True

    def step_or_say(self) -> bool:
        """A pass whose failure (storage or the cluster unreachable for a while) is one line, not the keeper's end:
        its lease runs out only if it stays failing longer than the lease's time to live."""
        try:
            return self.step()
        except Exception as exc:  # noqa: BLE001 - one line in its log; the next pass starts from storage again
            say(f"queue {self.name}: a pass failed ({type(exc).__name__}: {str(exc)[:300]})")
            return self.lease is not None

    def carry_admitted(self, state: State) -> None:
        for entry in state.admitted():
            data = self.cluster.job(entry.run_id)
            if not entry.submitted:
                continue  # submitted after the state that admits it is written
            if data is None:
                continue
            if entry.placed_at is None:
                how = self.cluster.placed(entry.run_id, data, entry.shape.workers)
                if how is None and now() - (entry.admitted_at or now()) > PLACE_TIMEOUT_S:
                    how = "timeout"
                if how is not None:
                    entry.placed_at, entry.placed_by = now(), how
                    entry.reason = "admitted, placed" if how != "timeout" else "admitted, not placed in time"
            if self.cluster.ended(entry.run_id):
                state.entries.remove(entry)
                state.ended.append(entry.run_id)

    def free(self, state: State) -> list[Node]:
        """The nodes' free resources minus what admitted runs declared that Ray does not hold for them yet: a run
        placed by its placement group or its driver is in Ray's numbers; one not placed (or that never placed
        its workers in time) counts with its whole declared shape until it ends."""
        free = self.cluster.free_per_node()
        for entry in state.admitted():
            if entry.placed_by in (None, "timeout"):
                free = place(entry.shape, free) or [{k: 0.0 for k in n} for n in free]
        return free

    def admit(self, state: State) -> Entry | None:
        queued = state.queued()
        admitted = state.admitted()
        waiting = next((e.run_id for e in admitted if e.placed_at is None), None)
        free = self.free(state)
        state.free = "; ".join(", ".join(f"{v:g} {k}" for k, v in sorted(n.items()) if k in ("CPU", "GPU"))
                               for n in free)
        grows = self.cluster.grows()  # then what does not fit now may fit once the autoscaler adds nodes
        largest = self.cluster.largest_per_node() if grows else None  # its autoscaling config's (None: unknown)
        state.largest, state.largest_from = largest or (None, "")  # submit refuses what can never fit it
        decision = decide(queued, admitted, free, self.limits, held=state.held, waiting_for=waiting,
                          total=state.largest if grows else self.cluster.total_per_node())
        if grows:
            self.asked = autoscaler.ask(self.cluster, self.asked, state, decision, admitted)
        chosen = state.find(decision.admit) if decision.admit else None
        for run in decision.skipped:
            entry = state.find(run)
            if entry is not None:
                entry.skips += 1
        rest = [e for e in queued if e is not chosen]
        for run, line in positioned(self.name, rest, decision.reasons).items():
            entry = state.find(run)
            if entry is not None:
                entry.reason = line
        if chosen is not None:
            chosen.status, chosen.admitted_at, chosen.reason = ADMITTED, now(), "admitted, submitting"
        return chosen

    def submit(self, state: State, entry: Entry) -> None:
        """Submit an admitted run (its slot is written already) and record it; then mark it submitted."""
        found = self.objects.get(entry.intent, LIMIT)
        if found is None:
            say(f"{entry.run_id}: its enqueue intent is gone; dropped")
            return
        body = dict(loads(found.data, entry.intent)["request"])
        body["submission_id"] = entry.run_id
        body.pop("queue", None)
        lost = self.cluster.restore_code(body, self.code)
        created: bool | None = None
        if lost:  # Ray would only fail it setting up its runtime env: it leaves the queue, told why
            why = f"{', '.join(lost)} collected by Ray while it waited in {self.name}; submit it again"
            say(f"{entry.run_id}: {why}; removed from the queue")
            self.record(entry.run_id, "cancelled", {**body, "queue": self.name, "why": why})
        else:
            try:
                created = self.cluster.submit(body)
                say(f"admitted {entry.run_id} ({'submitted' if created else 'Ray had it already'})")
                self.record(entry.run_id, "admitted", body)
            except RuntimeError as exc:  # Ray refused the request itself: it leaves the queue, which goes on
                say(f"{entry.run_id}: {exc}; removed from the queue")
                self.record(entry.run_id, "cancelled", {**body, "queue": self.name})
        while True:  # mark it submitted (another pass may have written the state meanwhile: this keeper's own)
            state, etag = self.read()
            mine = state.find(entry.run_id)
            if mine is None or mine.submitted:
                return
            if created is None:
                state.entries.remove(mine)
                state.ended.append(mine.run_id)
            mine.submitted, mine.reason = True, "admitted, waiting to be placed"
            try:
                self.write(state, etag)
                return
            except PreconditionFailed:
                continue

    def resubmit_unseen(self) -> None:
        """A keeper that took over submits what its predecessor admitted but may not have submitted."""
        state, _ = self.read()
        for entry in state.admitted():
            if not entry.submitted:
                self.submit(state, entry)

    def code(self, package: str) -> bytes | None:
        found = self.objects.get(f"{CODE}{package}", 512 << 20)
        return None if found is None else found.data

    def forget_ended(self, state: State) -> None:
        """Delete the intents of runs that left the queue, and every folded hold or release but the last one (the
        state that holds what they said is written first); the next pass drops them from ``folded`` and ``ended``,
        so a queue held and released for months lists no more intents than its runs have."""
        gone = set(state.ended)
        switches = [rel for rel in state.folded if intent_run(rel) is None]  # in the order they were folded
        superseded = set(switches[:-1])
        for rel in state.folded:
            if intent_run(rel) in gone or rel in superseded:
                self.objects.delete(rel)

    def request_of(self, rel: str) -> dict[str, Any]:
        found = self.objects.get(rel, LIMIT)
        body = dict(loads(found.data, rel).get("request") or {}) if found is not None else {}
        return {**body, "queue": self.name}

    def run(self, poll_s: float = 1.0, idle_exit_s: float | None = None) -> int:
        self.hold_lease()
        if self.lease is None:
            say(f"queue {self.name}: another keeper holds the lease")
            return 0
        self.resubmit_unseen()
        idle_since = now()
        while self.step_or_say():
            state, _ = self.read()
            if state.entries:
                idle_since = now()
            elif idle_exit_s is not None and now() - idle_since > idle_exit_s:
                leases.give_up(self.objects, self.lease) if self.lease else None
                return 0
            time.sleep(poll_s)
        say(f"queue {self.name}: lease lost to another keeper; stopping")
        return 0


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    holder = args[0] if args else os.environ.get("RAY_JOB_SUBMISSION_ID") or "keeper"
    from ..core.secret_refs import unseal

    unseal(os.environ)  # the client's AWS credentials travel sealed (its py_modules), not env_vars
    from ..backends.keepers import RayKeeperCluster
    from ..storage.opening import objects_for

    queue = json.loads(os.environ[contract.ENV_QUEUE])  # {"uri", "name", "endpoint", "limits"} (backends/keepers.py)
    limits = Limits(**(queue.get("limits") or {}))
    objects = objects_for(queue["uri"], queue.get("endpoint") or None)
    keeper = Keeper(objects, str(queue["name"]), RayKeeperCluster(), holder, limits)
    sys.exit(keeper.run())


if __name__ == "__main__":
    main()
