"""What the keeper asks a growing cluster's autoscaler for (queue/autoscaler.py), pass by pass: the admitted runs'
and the first short run's bundles, once while they stay the same, withdrawn when none is short or the queue is
held, left standing while a pass weighs nothing. The cluster here records the asks; Ray's request_resources acting
on them is tested against Ray's autoscaler in tests/e2e/test_queue_autoscaler.py."""

from __future__ import annotations

from rtjob.queue import autoscaler
from rtjob.queue.admission import Limits, decide
from rtjob.queue.format import ADMITTED, QUEUED, Entry, Shape, State

FREE = [{"CPU": 1.0}]


class Asked:
    def __init__(self) -> None:
        self.asks: list[list[dict[str, float]]] = []

    def ask_for(self, bundles: list[dict[str, float]]) -> None:
        self.asks.append(bundles)


def entry(run_id: str, cpus: float, status: str = QUEUED, at: float = 0.0) -> Entry:
    return Entry(run_id=run_id, priority=0, user="ann", job="j", enqueued_at=at, arrival=int(at),
                 shape=Shape(workers=1, per_worker={"CPU": cpus}), intent=f"intents/enqueue-{run_id}.json",
                 status=status)


def one_pass(cluster: Asked, asked: list | None, state: State, waiting_for: str | None = None,
             reasons: dict[str, str] | None = None) -> list | None:
    decision = decide(state.queued(), state.admitted(), FREE, Limits(), held=state.held, waiting_for=waiting_for)
    asked = autoscaler.ask(cluster, asked, state, decision, state.admitted())
    (reasons if reasons is not None else {}).update(decision.reasons)
    return asked


def test_the_short_run_and_the_admitted_ones_are_asked_for_once_then_withdrawn() -> None:
    cluster, state = Asked(), State("team")
    state.entries = [entry("running", 1.0, ADMITTED), entry("big", 2.0, at=1), entry("bigger", 4.0, at=2)]
    reasons: dict[str, str] = {}
    asked = one_pass(cluster, None, state, reasons=reasons)
    assert cluster.asks == [[{"CPU": 1.0}, {"CPU": 2.0}]]  # the first short run only, with what runs
    assert reasons["big"].endswith("; the autoscaler is asked for it") and "asked" not in reasons["bigger"]
    asked = one_pass(cluster, asked, state)
    assert len(cluster.asks) == 1  # the same ask stands: not asked again
    assert one_pass(cluster, asked, state, waiting_for="running") == asked and len(cluster.asks) == 1
    state.held = True
    asked = one_pass(cluster, asked, state)
    assert cluster.asks[-1] == [] and asked == []  # held: withdrawn
    state.held, state.entries = False, [entry("running", 1.0, ADMITTED)]
    assert one_pass(cluster, asked, state) == [] and len(cluster.asks) == 2  # none short: nothing more to withdraw


def test_an_ask_ray_refuses_is_one_line_and_asked_again_next_pass(capsys) -> None:
    class Refusing(Asked):
        def ask_for(self, bundles: list[dict[str, float]]) -> None:
            super().ask_for(bundles)
            raise RuntimeError("GCS unreachable")

    cluster, state, reasons = Refusing(), State("team"), {}
    state.entries = [entry("big", 2.0)]
    assert one_pass(cluster, None, state, reasons=reasons) is None  # nothing stands: the next pass asks again
    assert "asked" not in reasons["big"]
    assert "the autoscaler not asked for 1 bundle(s): RuntimeError: GCS unreachable" in capsys.readouterr().out
    one_pass(cluster, None, state)
    assert len(cluster.asks) == 2
