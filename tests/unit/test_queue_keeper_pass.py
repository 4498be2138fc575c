"""The keeper's own passes (rtjob/queue/keeper.py), over folder storage with Ray stood in by an in-memory cluster
(what cannot run here is nothing: the keeper's Cluster protocol is all it asks of Ray; tests/e2e/test_queue_keeper.py
runs it against a real cluster): an admitted run counts with its whole declared shape until Ray holds it (its
placement group), and still after the placement time-out gave up on it; a run skipped `max_skips` times blocks
skip-ahead, its count kept in the queue's state from pass to pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rtjob.jobspec.queues import QueueSettings
from rtjob.queue import client, keeper
from rtjob.queue.admission import Limits
from rtjob.queue.format import Shape, State
from rtjob.queue.keeper import Keeper

NODE_CPUS = 2.0


class InMemoryCluster:
    """Two nodes of 2 CPUs. A submitted run reserves nothing in Ray (a plain script declares, Ray never holds):
    ``placed_by`` says what the keeper's placement check answers for each run (None: not placed yet)."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.placed_by: dict[str, str | None] = {}
        self.finished: set[str] = set()

    def free_per_node(self) -> list[dict[str, float]]:
        return [{"CPU": NODE_CPUS}, {"CPU": NODE_CPUS}]

    def total_per_node(self) -> list[dict[str, float]]:
        return [{"CPU": NODE_CPUS}, {"CPU": NODE_CPUS}]

    def grows(self) -> bool:
        return False

    def largest_per_node(self) -> tuple[list[dict[str, float]], str] | None:
        raise AssertionError("a fixed cluster does not grow")

    def ask_for(self, bundles: list[dict[str, float]]) -> None:
        raise AssertionError("a fixed cluster has no autoscaler to ask")

    def hold_sealed(self, queued: list[Any], request_of: Any) -> None:
        return None

    def job(self, run_id: str) -> dict[str, Any] | None:
        return {"status": "RUNNING"} if run_id in self.submitted else None

    def submit(self, body: dict[str, Any]) -> bool:
        self.submitted.append(str(body["submission_id"]))
        return True

    def restore_code(self, body: dict[str, Any], fetch: Any) -> list[str]:
        return []

    def placed(self, run_id: str, data: dict[str, Any], workers: int) -> str | None:
        return self.placed_by.get(run_id)

    def ended(self, run_id: str) -> bool:
        return run_id in self.finished

    def stop(self, run_id: str) -> None:
        self.finished.add(run_id)


def _queue(tmp_path: Path, limits: Limits) -> tuple[client.QueueRef, InMemoryCluster, Keeper]:
    ref = client.QueueRef.of(QueueSettings(name="team"), str(tmp_path))
    cluster = InMemoryCluster()
    objects = ref.objects()  # folder storage
    return ref, cluster, Keeper(objects, "team", cluster, "rtjob-keeper-team-1", limits,
                                record=lambda run_id, what, body: None)


def _enqueue(ref: client.QueueRef, run_id: str, workers: int, at: float) -> None:
    client.enqueue(ref, run_id, {"submission_id": run_id, "entrypoint": "python train.py"},
                   Shape(workers=workers, per_worker={"CPU": 1.0}), user="alice", job="train", enqueued_at=at)


def _state(k: Keeper) -> State:
    return k.read()[0]


def test_an_admitted_run_counts_with_its_shape_until_its_placement_times_out_and_then_still(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref, cluster, k = _queue(tmp_path, Limits())
    _enqueue(ref, "r-first", 3, 1.0)   # 3 × 1 CPU of the 4
    _enqueue(ref, "r-second", 3, 2.0)  # fits only once the first's CPUs are free
    assert k.step() and cluster.submitted == ["r-first"]
    for _ in range(3):  # Ray's free CPUs still say 4 (its script reserves nothing): r-first's 3 count anyway
        assert k.step()
    state = _state(k)
    assert sum(n["CPU"] for n in k.free(state)) == 1.0 and cluster.submitted == ["r-first"]
    first = state.find("r-first")
    assert first is not None and first.placed_at is None and state.find("r-second") is not None

    # Its placement never comes: past PLACE_TIMEOUT_S it is marked so (admission's gate opens), but its declared
    # shape still counts: r-second (3 CPUs) still does not fit the 1 left.
    monkeypatch.setattr(keeper, "now", lambda: (first.admitted_at or 0.0) + keeper.PLACE_TIMEOUT_S + 1)
    assert k.step()
    timed_out = _state(k).find("r-first")
    assert timed_out is not None and (timed_out.placed_by, timed_out.reason) == (
        "timeout", "admitted, not placed in time")
    assert sum(n["CPU"] for n in k.free(_state(k))) == 1.0 and cluster.submitted == ["r-first"]

    cluster.finished.add("r-first")  # it ends: its slot goes, and the next pass admits r-second
    assert k.step() and k.step()
    assert cluster.submitted == ["r-first", "r-second"]


def test_a_run_its_placement_group_holds_counts_once_in_rays_own_numbers(tmp_path: Path) -> None:
    """Placed by its placement group, an admitted run is in Ray's free numbers: the keeper stops subtracting its
    declared shape (else it would count twice and hold the queue back)."""
    ref, cluster, k = _queue(tmp_path, Limits())
    _enqueue(ref, "r-first", 3, 1.0)
    assert k.step() and cluster.submitted == ["r-first"]
    cluster.placed_by["r-first"] = "pg"
    cluster.free_per_node = lambda: [{"CPU": 0.0}, {"CPU": 1.0}]  # type: ignore[method-assign]  # Ray holds 3
    assert k.step()
    state = _state(k)
    placed = state.find("r-first")
    assert placed is not None and placed.placed_by == "pg" and placed.placed_at is not None
    assert [n["CPU"] for n in k.free(state)] == [0.0, 1.0]  # Ray's numbers alone, not 3 less again


def test_a_run_skipped_max_skips_times_blocks_skip_ahead_across_passes(tmp_path: Path) -> None:
    """best-effort: later runs that fit go ahead of a big one that does not; each pass that skips it counts, in
    the queue's state, and once it has been skipped max_skips times nothing more goes ahead of it."""
    ref, cluster, k = _queue(tmp_path, Limits(max_skips=2))
    cluster.free_per_node = lambda: [{"CPU": 1.0}, {"CPU": 0.0}]  # type: ignore[method-assign]
    _enqueue(ref, "r-big", 2, 1.0)
    for n in range(4):
        _enqueue(ref, f"r-small-{n}", 1, 2.0 + n)
    for _ in range(8):
        assert k.step()
        for run in cluster.submitted:  # each admitted small run is placed and ends at once
            cluster.finished.add(run)
    state = _state(k)
    big = state.find("r-big")
    assert big is not None and big.status == "queued" and big.skips == 2, big
    assert cluster.submitted == ["r-small-0", "r-small-1"], cluster.submitted  # then the big one blocks
    assert [e.run_id for e in state.queued()][:1] == ["r-big"]
