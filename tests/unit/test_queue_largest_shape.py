"""A growing cluster's largest shape (backends/ray/largest_shape.py): the head as it runs plus each worker node
type at its max_workers (held to the global one), read from the autoscaling config that the monitor of this cluster names on its command
line (another cluster's monitor on the same machine is not it); unknown where a type lacks resources or a count;
the queue's state keeps it, and a submit's check (queue/client.never_fits) says what the largest cluster is. The
/proc here is a directory laid out as Linux's; the monitor's real one is read in tests/e2e/test_queue_autoscaler.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rtjob.backends.ray.largest_shape import largest, monitor_config, read_largest
from rtjob.queue.admission import fits, nodes_line
from rtjob.queue.format import Shape, State

HEAD = {"CPU": 1.0, "memory": 1e9}
CONFIG = {"head_node_type": "head", "max_workers": 4, "available_node_types": {
    "head": {"resources": {"CPU": 1}, "max_workers": 0},
    "gpu": {"resources": {"CPU": 8, "GPU": 1}, "max_workers": 2},
    "cpu": {"resources": {"CPU": 2}},  # no max_workers: the global one
}}


def monitor(proc: Path, pid: int, gcs: str, config: Path) -> None:
    (proc / str(pid)).mkdir(parents=True)
    args = ["/usr/bin/python3", "-u", "/venv/lib/python3.11/site-packages/ray/autoscaler/_private/monitor.py",
            "--logs-dir=/tmp/ray/session/logs", f"--gcs-address={gcs}", f"--autoscaling-config={config}"]
    (proc / str(pid) / "cmdline").write_bytes("\0".join(args).encode() + b"\0")


def test_the_largest_shape_is_the_head_and_each_type_at_its_max_workers() -> None:
    nodes = largest(CONFIG, HEAD)
    assert nodes == [HEAD, *[{"CPU": 8.0, "GPU": 1.0}] * 2, *[{"CPU": 2.0}] * 4]
    assert nodes_line(nodes) == "1 node of 1 CPU, 2 nodes of 8 CPU + 1 GPU, 4 nodes of 2 CPU"
    assert fits(Shape(workers=2, per_worker={"GPU": 1.0}), nodes)
    assert not fits(Shape(workers=3, per_worker={"GPU": 1.0}), nodes)
    no_resources = {**CONFIG, "available_node_types": {**CONFIG["available_node_types"], "cpu": {"max_workers": 1}}}
    assert largest(no_resources, HEAD) is None
    assert largest({**CONFIG, "max_workers": None}, HEAD) is None  # the cpu type's count is then unknown
    assert largest({}, HEAD) is None
    # The global max_workers holds each type: one worker node at once here, so two GPU workers can never fit.
    capped = largest({**CONFIG, "max_workers": 1}, HEAD)
    assert capped == [HEAD, {"CPU": 8.0, "GPU": 1.0}, {"CPU": 2.0}], capped
    assert fits(Shape(workers=1, per_worker={"GPU": 1.0}), capped or [])
    assert not fits(Shape(workers=2, per_worker={"GPU": 1.0}), capped or [])


def test_the_config_is_read_from_this_clusters_monitor_only(tmp_path: Path) -> None:
    proc, mine, theirs = tmp_path / "proc", tmp_path / "mine.yaml", tmp_path / "theirs.json"
    mine.write_text("head_node_type: head\nmax_workers: 1\navailable_node_types:\n  head: {max_workers: 0}\n"
                    "  w: {resources: {CPU: 2}, max_workers: 1}\n")
    theirs.write_text(json.dumps(CONFIG))
    monitor(proc, 10, "10.0.0.5:6380", theirs)
    (proc / "11").mkdir()  # a process gone between the listing and the read
    (proc / "self").mkdir()
    assert monitor_config(6379, str(proc)) is None
    monitor(proc, 12, "10.0.0.5:6379", mine)
    assert monitor_config(6379, str(proc)) == mine and monitor_config(6380, str(proc)) == theirs
    found = read_largest(6379, HEAD, str(proc))
    assert found == ([HEAD, {"CPU": 2.0}], str(mine))


def test_the_state_keeps_the_largest_shape() -> None:
    state = State("team", largest=[HEAD, {"CPU": 2.0}], largest_from="/home/ray/ray_bootstrap_config.yaml")
    back = State.from_bytes(state.to_bytes(), "team")
    assert back.largest == state.largest and back.largest_from == state.largest_from
    assert State.from_bytes(State("team").to_bytes(), "team").largest is None


def test_a_submit_reads_the_queues_lease_once_for_its_check_and_its_keeper(tmp_path: Path) -> None:
    """submit --queue: never_fits returns the lease it read, and ensure_keeper takes it while it is alive instead
    of reading it again (on S3 a round trip each); a lease that lapsed since is read afresh."""
    from rtjob.jobspec.queues import QueueSettings
    from rtjob.queue import client, lease

    ref = client.QueueRef.of(QueueSettings(name="team"), str(tmp_path))
    with ref.objects() as objects:
        held = lease.take(objects, "rtjob-keeper-team-1")
    assert held is not None
    why, seen = client.never_fits(ref, Shape(workers=1, per_worker={"CPU": 1.0}))
    assert why is None and seen is not None and seen.holder == held.holder

    class NoReads(client.QueueRef):
        def objects(self):  # type: ignore[no-untyped-def]
            raise AssertionError("the lease was read again")

    unread = NoReads(**{f.name: getattr(ref, f.name) for f in dataclasses.fields(ref)})
    assert client.ensure_keeper(None, unread, seen=seen) == held.holder  # alive: no read, no keeper started
    lapsed = dataclasses.replace(seen, beat=seen.beat - 2 * seen.ttl)
    assert client.ensure_keeper(None, ref, seen=lapsed) == held.holder  # read afresh: the keeper still holds it
