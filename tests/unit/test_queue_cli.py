"""`rtjob queue` and a queued run's views over folder storage, no cluster (issue 44): three runs enqueued with the
queue's client (rtjob/queue/client.py) and folded as the keeper folds them (rtjob/queue/fold.py, its lease taken),
then the real CLI in this process: `rtjob queue team` (text and -o json: position 1 = next, priority first),
`status` of a queued run (its place in one line), `queue priority|hold|release` (each an intent the keeper folds),
and `stop` of a queued run: cancelled in the queue, recorded STOPPED, never sent to any cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rtjob.core.lifecycle import Queued, apply
from rtjob.core.record import RunRecord
from rtjob.jobspec.queues import QueueSettings
from rtjob.queue import client, lease
from rtjob.queue.fold import fold
from rtjob.queue.format import INTENTS_FOLDER, LIMIT, STATE, Shape, State, loads
from rtjob.storage.run_ports import run_ports
from support.project import ProjectCli, write_files

RUNS = [("r-small", "alice", 0), ("r-big", "bob", 10), ("r-late", "alice", 0)]  # enqueued in this order


@pytest.fixture
def queued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[ProjectCli, Path]:
    cli = ProjectCli(tmp_path, monkeypatch, capsys)
    store = tmp_path / "store"
    write_files(cli.project, {"rtjob.toml": f'storage = "{store}"\n\n[queues.team]\npolicy = "strict"\n',
                              "jobs/train.yaml": "name: train\nentrypoint: python train.py\nqueue: team\n"})
    ref = client.QueueRef.of(QueueSettings(name="team"), str(store))
    for n, (run_id, user, priority) in enumerate(RUNS):
        uri = f"{store}/train/{run_id}"
        record = RunRecord(id=run_id, job="train", backend="local", storage_uri=uri, user=user,
                           spec={"document": {"name": "train"}}, request={"submission_id": run_id})
        apply(record, Queued({"name": "team", "priority": priority, "storage": str(store)},
                             at=f"2026-12-02T10:0{n}:00+00:00"))
        run_ports(uri).record.update(lambda _stored, r=record: r)
        client.enqueue(ref, run_id, {"submission_id": run_id}, Shape(workers=2, per_worker={"CPU": 1.0}),
                       user=user, job="train", priority=priority, enqueued_at=1_700_000_000.0 + n)
    _keeper_folds(ref)
    return cli, store


def _keeper_folds(ref: client.QueueRef) -> State:
    """What the keeper does each turn, short of admitting: fold the intents into the state (If-Match) under its lease."""
    with ref.objects() as objects:
        assert lease.take(objects, "rtjob-keeper-team-1") is not None or lease.read(objects) is not None
        state, etag = client.read_state(objects, "team")
        intents = [{**loads(o.data, x.rel), "_name": x.rel} for x in objects.list(INTENTS_FOLDER)
                   if (o := objects.get(x.rel, LIMIT)) is not None]
        fold(state, intents)
        for entry in state.queued():
            entry.reason = "needs 2 × 1 CPU, 0 free"
        objects.put(STATE, state.to_bytes(), **({"if_match": etag} if etag else {"if_absent": True}))
    return state


def test_rtjob_queue_lists_position_priority_user_and_why(queued: tuple[ProjectCli, Path]) -> None:
    cli, _ = queued
    proc = cli("queue", "team", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["id"], r["status"], r["position"], r["priority"], r["user"]) for r in rows] == [
        ("r-big", "QUEUED", 1, 10, "bob"), ("r-small", "QUEUED", 2, 0, "alice"), ("r-late", "QUEUED", 3, 0, "alice")]
    assert all(r["reason"] == "needs 2 × 1 CPU, 0 free" and r["job"] == "train" for r in rows)
    assert rows[0]["waiting_since"] == "2023-11-14T22:13:21+00:00"
    text = cli("queue")  # the settings' queue: the job's `queue:` is not a setting; the project names none
    assert text.returncode == 2 and "which queue?" in text.stderr
    text = cli("queue", "team")
    assert text.returncode == 0, text.stderr
    assert "queue team: 3 queued, 0 admitted; keeper rtjob-keeper-team-1 (alive)" in text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["POS", "STATUS", "PRIO"] and lines[1].split("\t")[:3] == ["1", "QUEUED", "10"]
    assert cli("queue", "nope").returncode == 2


def test_a_queued_runs_status_is_its_place_and_priority_hold_release_are_intents(
        queued: tuple[ProjectCli, Path]) -> None:
    cli, store = queued
    status = cli("status", "r-small", "-o", "json")
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert seen["status"] == "QUEUED"
    assert seen["message"] == "position 2 of 3 in team: needs 2 × 1 CPU, 0 free"
    assert cli("queue", "priority", "r-late", "50").returncode == 0
    assert cli("queue", "priority", "r-late", "5000").returncode == 2
    assert cli("queue", "hold", "team").returncode == 0
    state = _keeper_folds(client.QueueRef.of(QueueSettings(name="team"), str(store)))
    assert state.held and [e.run_id for e in state.queued()] == ["r-late", "r-big", "r-small"]
    shown = json.loads(cli("status", "r-late", "-o", "json").stdout)
    assert shown["message"].startswith("position 1 of 3 in team: the queue is held")
    assert cli("queue", "release", "team").returncode == 0
    assert not _keeper_folds(client.QueueRef.of(QueueSettings(name="team"), str(store))).held


def test_stop_of_a_queued_run_cancels_it_and_it_never_reaches_a_cluster(queued: tuple[ProjectCli, Path]) -> None:
    cli, store = queued
    proc = cli("stop", "r-big", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "STOPPED"
    stored = RunRecord.loads((store / "train" / "r-big" / "rtjob-run.json").read_text(), "record")
    assert stored.status == "STOPPED" and "admitted" not in stored.timeline
    assert stored.message == "cancelled while queued in team: it never reached the cluster"
    cancels = [p.name for p in (store / "queues" / "team" / "intents").iterdir() if p.name.startswith("cancel-")]
    assert len(cancels) == 1 and "r-big" in cancels[0]
    state = _keeper_folds(client.QueueRef.of(QueueSettings(name="team"), str(store)))
    assert [e.run_id for e in state.queued()] == ["r-small", "r-late"]  # the keeper drops it: never admitted
    after = json.loads(cli("queue", "team", "-o", "json").stdout)
    assert [r["id"] for r in after] == ["r-small", "r-late"] and [r["position"] for r in after] == [1, 2]
    again = cli("status", "r-big", "-o", "json")
    assert json.loads(again.stdout)["status"] == "STOPPED"


def test_runs_of_a_teams_storage_list_a_queued_run_with_its_place(queued: tuple[ProjectCli, Path]) -> None:
    cli, store = queued
    from rtjob.storage.index_entries import write_entry

    for run_id, _, _ in RUNS:  # the index entry each run's record writer leaves
        write_entry(str(store), None, RunRecord.loads((store / "train" / run_id / "rtjob-run.json").read_text(), "r"))
    proc = cli("runs", "--storage", str(store), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    listed = {row["id"]: row for row in json.loads(proc.stdout)}
    assert listed["r-big"]["status"] == "QUEUED"
    assert listed["r-big"]["message"] == "position 1 of 3 in team: needs 2 × 1 CPU, 0 free"


def test_rtjob_list_shows_the_queued_runs_no_cluster_holds_yet(queued: tuple[ProjectCli, Path]) -> None:
    """`list` (runs/listed.with_queued over the cluster's answer, here none) shows first the queued runs this machine
    knows that no cluster holds yet, newest first, each at its place in its queue."""
    cli, store = queued
    from rtjob.runs.memory import remember

    for run_id, _, _ in RUNS:
        remember(RunRecord.loads((store / "train" / run_id / "rtjob-run.json").read_text(), "r"))
    from rtjob.backends import get_backend
    from rtjob.jobspec.project import load_settings
    from rtjob.runs.listed import with_queued

    listed = with_queued(get_backend(load_settings({"backend": "local"}, cli.project)), [])
    assert [(i.id, i.status.value, i.message) for i in listed] == [
        ("r-late", "QUEUED", "position 3 of 3 in team: needs 2 × 1 CPU, 0 free"),
        ("r-big", "QUEUED", "position 1 of 3 in team: needs 2 × 1 CPU, 0 free"),
        ("r-small", "QUEUED", "position 2 of 3 in team: needs 2 × 1 CPU, 0 free")]


def test_a_lapsed_lease_reads_as_a_lost_keeper_except_just_after_the_enqueue(queued: tuple[ProjectCli, Path]) -> None:
    """Never stale while the keeper holds the lease; once it lapses every view says UNKNOWN (keeper lost), except for
    a run queued moments ago, whose submit started the keeper that is about to take the lease."""
    cli, store = queued
    ref = client.QueueRef.of(QueueSettings(name="team"), str(store))
    with ref.objects() as objects:
        held = lease.read(objects)
        assert held is not None and held.alive()
        lease.give_up(objects, held)
    old = json.loads(cli("status", "r-small", "-o", "json").stdout)  # queued at 10:01 today: long ago
    assert old["status"] == "UNKNOWN" and old["message"].startswith("queued in team, whose keeper is not running")
    uri = f"{store}/train/r-now"  # queued now: its enqueue not folded yet either
    record = apply(RunRecord(id="r-now", job="train", backend="local", storage_uri=uri, user="carol",
                             spec={"document": {"name": "train"}}), Queued({"name": "team", "priority": 0,
                                                                            "storage": str(store)}))
    run_ports(uri).record.update(lambda _stored: record)
    client.enqueue(ref, "r-now", {"submission_id": "r-now"}, Shape(), user="carol", job="train")
    fresh = json.loads(cli("status", "r-now", "-o", "json").stdout)
    assert fresh["status"] == "QUEUED"
    assert fresh["message"] == "queued in team: its keeper is starting; not yet ordered by its keeper"


def test_a_pipelines_step_enqueued_at_its_turn_keeps_its_pipelines_priority_and_first_enqueue_time(
        queued: tuple[ProjectCli, Path]) -> None:
    """A pipeline's step is enqueued by its supervisor only when the step before it ended (queue/steps.py), with
    the body its client prepared: the pipeline's priority and submit time, so it goes behind runs that arrived
    before the pipeline and ahead of those that arrived after it, whenever it is enqueued; once only."""
    from rtjob.queue import steps

    _, store = queued
    step = {"submission_id": "p-1-train", "entrypoint": "python train.py", "runtime_env": {}, "metadata": {},
            steps.QUEUE_KEY: {"name": "team", "storage": str(store), "endpoint": None, "limits": {}, "record": {},
                              "shape": Shape(workers=2, per_worker={"CPU": 1.0}).to_json(), "user": "carol",
                              "job": "train", "priority": 0, "enqueued_at": 1_700_000_001.5, "pipeline_id": "p-1"}}
    assert steps.enqueue_step(step) is True and steps.enqueue_step(step) is False  # never doubled
    state = _keeper_folds(steps.ref_of(step))
    assert [e.run_id for e in state.queued()] == ["r-big", "r-small", "p-1-train", "r-late"]
    entry = state.find("p-1-train")
    assert entry is not None and entry.pipeline_id == "p-1" and entry.user == "carol"
    with steps.ref_of(step).objects() as objects:  # the keeper POSTs the body without the queue's own key
        found = objects.get(entry.intent, LIMIT)
        assert found is not None and steps.QUEUE_KEY not in loads(found.data, entry.intent)["request"]
    steps.cancel_step(step, "its pipeline's supervisor")
    assert "p-1-train" not in [e.run_id for e in _keeper_folds(steps.ref_of(step)).queued()]


def test_wait_of_a_queued_run_past_its_timeout_says_it_is_still_queued(queued: tuple[ProjectCli, Path]) -> None:
    """`wait --timeout` counts the time a run waits in its queue: past it, exit 4 with one line saying the run is
    still queued (not "still running": it never ran) and stays in its queue."""
    cli, store = queued
    proc = cli("wait", "r-big", "--timeout", "0.5s")
    assert proc.returncode == 4, proc.stderr
    assert "rtjob: error: run r-big is still queued in team after the --timeout; it stays queued" in proc.stderr
    assert "still running" not in proc.stderr
    state = _keeper_folds(client.QueueRef.of(QueueSettings(name="team"), str(store)))
    assert "r-big" in [e.run_id for e in state.queued()]  # nothing cancelled it
