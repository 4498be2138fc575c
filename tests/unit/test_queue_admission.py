"""The queue's admission rule (queue/admission.py) as a table: priority, arrival, best-effort skip-ahead,
max_skips, strict, the per-user cap, max_running, a run that can never fit, a held queue, an unplaced admission."""

from __future__ import annotations

import pytest
from rtjob.queue.admission import Limits, decide, fits, positioned
from rtjob.queue.format import ADMITTED, Entry, Shape, State, order_key


def run(run_id: str, *, gpus: int = 0, cpus: int = 1, workers: int = 1, priority: int = 0, at: float = 0.0,
        user: str = "ann", skips: int = 0) -> Entry:
    per = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    return Entry(run_id=run_id, priority=priority, user=user, job="j", enqueued_at=at, arrival=int(at),
                 shape=Shape(workers=workers, per_worker=per), intent=f"intents/enqueue-{run_id}.json", skips=skips)


def nodes(*cpus_gpus: tuple[int, int]) -> list[dict[str, float]]:
    return [{"CPU": float(c), "GPU": float(g)} for c, g in cpus_gpus]


BIG = dict(gpus=1, workers=2)  # 2 nodes × 1 GPU
FREE_1GPU = nodes((4, 1), (4, 0))
FREE_2GPU = nodes((4, 1), (4, 1))
BE, STRICT = Limits(), Limits(policy="strict")

CASES = [
    # (name, queued (any order), admitted, free, limits, admitted now, skipped)
    ("priority first", [run("low", at=1), run("high", priority=10, at=2)], [], FREE_2GPU, BE, "high", []),
    ("then arrival", [run("b", at=2), run("a", at=1)], [], FREE_2GPU, BE, "a", []),
    ("best-effort skips ahead", [run("big", at=1, **BIG), run("small", at=2)], [], FREE_1GPU, BE, "small", ["big"]),
    ("max_skips blocks skip-ahead", [run("big", at=1, skips=3, **BIG), run("small", at=2)], [], FREE_1GPU, BE, None, []),
    ("strict keeps FIFO", [run("big", at=1, **BIG), run("small", at=2)], [], FREE_1GPU, STRICT, None, []),
    ("strict within a priority only", [run("big", at=1, **BIG), run("urgent", priority=5, at=2)], [], FREE_1GPU,
     STRICT, "urgent", []),
    ("the fitting head goes", [run("big", at=1, **BIG), run("small", at=2)], [], FREE_2GPU, BE, "big", []),
    ("per-user cap passes to another user", [run("a2", at=1, user="ann"), run("b1", at=2, user="bob")],
     [run("a1", user="ann")], FREE_2GPU, Limits(max_running_per_user=1), "b1", []),
    ("max_running stops every admission", [run("a", at=1)], [run("x"), run("y")], FREE_2GPU, Limits(max_running=2),
     None, []),
    ("never fits does not block", [run("huge", at=1, gpus=8), run("small", at=2)], [], FREE_2GPU, STRICT, "small", []),
    ("nothing fits", [run("big", at=1, **BIG)], [], FREE_1GPU, BE, None, []),
]


@pytest.mark.parametrize(("queued", "admitted", "free", "limits", "admit", "skipped"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_admission_rule(queued: list[Entry], admitted: list[Entry], free: list[dict[str, float]], limits: Limits,
                            admit: str | None, skipped: list[str]) -> None:
    ordered = sorted(queued, key=order_key)
    decision = decide(ordered, admitted, free, limits, total=FREE_2GPU)
    assert (decision.admit, decision.skipped) == (admit, skipped)
    waiting = [e.run_id for e in ordered if e.run_id != admit]
    assert set(decision.reasons) == set(waiting)  # every run that waits says why


def test_held_and_unplaced_admit_nothing_and_say_why() -> None:
    queued = [run("a")]
    assert decide(queued, [], FREE_2GPU, BE, held=True).reasons == {"a": "the queue is held"}
    waiting = decide(queued, [run("b")], FREE_2GPU, BE, waiting_for="b")
    assert (waiting.admit, waiting.reasons) == (None, {"a": "waiting for b to be placed"})


def test_a_waiting_runs_line() -> None:
    queued = sorted([run("high", priority=10, at=1, gpus=1, workers=2), run("big", at=2, **BIG)], key=order_key)
    decision = decide(queued, [], FREE_1GPU, STRICT)
    lines = positioned("team", queued, decision.reasons)
    assert lines["big"] == ("position 2 of 2 in team: behind high (strict order), priority 10; behind priority 10")
    assert lines["high"] == "position 1 of 2 in team: needs 2 × 1 CPU + 1 GPU; 8 CPU, 1 GPU free"


def test_a_gang_needs_its_bundles_on_nodes_and_the_data_allowance() -> None:
    assert not fits(Shape(workers=2, per_worker={"GPU": 1}), nodes((8, 2)) and [{"GPU": 1.0}])
    assert fits(Shape(workers=2, per_worker={"GPU": 1}), nodes((8, 1), (8, 1)))
    assert not fits(Shape(workers=2, per_worker={"CPU": 4}, data_cpus=1), nodes((4, 0), (4, 0)))
    assert fits(Shape(workers=2, per_worker={"CPU": 4}, data_cpus=1), nodes((4, 0), (5, 0)))
    assert not fits(Shape(entrypoint={"CPU": 1}, workers=1, per_worker={"CPU": 4}), nodes((4, 0)))


def test_the_state_round_trips_and_orders() -> None:
    state = State("team", entries=[run("b", at=2), run("a", at=1, priority=1)])
    state.entries[0].status = ADMITTED
    back = State.from_bytes(state.to_bytes(), "team")
    assert [e.run_id for e in back.queued()] == ["a"] and [e.run_id for e in back.admitted()] == ["b"]
    assert back.entries[1].shape == state.entries[1].shape


def test_the_first_run_short_of_resources_is_named_for_the_autoscaler_and_a_held_pass_weighs_nothing() -> None:
    big, small = run("big", at=1, **BIG), run("small", at=2, cpus=8)
    decision = decide([big, small], [], FREE_1GPU, BE)
    assert decision.judged and decision.short == "big" and decision.admit is None
    assert not decide([big], [], FREE_1GPU, BE, held=True).judged
    assert decide([big], [], FREE_1GPU, BE, waiting_for="x").short is None


def test_a_shape_as_rays_bundles_names_the_driver_each_worker_and_the_data_allowance() -> None:
    shape = Shape(workers=2, per_worker={"CPU": 1.0, "GPU": 1.0, "memory": 0.0}, entrypoint={"CPU": 0.5},
                  data_cpus=2.0)
    assert shape.bundles() == [{"CPU": 0.5}, {"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}, {"CPU": 2.0}]
    assert Shape().bundles() == []
