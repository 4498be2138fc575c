"""The queue's keeper for real, on the session's 2-node embedded cluster (CPU shapes, folder storage): started by
ensure_keeper as a Ray job of its own, it admits queued runs by priority then arrival with no client doing
anything but watch; and a keeper that died between writing an admission and submitting it (the state it leaves:
admitted, not marked submitted, its lease run out) is replaced by the next ensure_keeper, which submits that run
exactly once, whether or not the dead one had reached Ray. Observed through the Jobs API and the queue's state."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from rtjob.backends.keepers import SEALED_URI
from rtjob.queue import lease as leases
from rtjob.queue.client import QueueRef, enqueue, ensure_keeper, hold, read, release
from rtjob.queue.format import ADMITTED, STATE, Shape, State
from support.cli import REPO, new_id
from support.ray_jobs import JobsAPI, ended, wait_for

pytestmark = pytest.mark.cluster

SHAPE = Shape(entrypoint={"CPU": 1.0})


@pytest.fixture
def backend(cluster_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    from rtjob.backends import backend_class, configured

    for name in ("RTJOB_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, cluster_env[name])
    return backend_class("local")(configured({"backend": "local"}, REPO))


def body(run_id: str, code: str = "print('ran')") -> dict[str, Any]:
    return {"entrypoint": f"python -c \"{code}\"", "submission_id": run_id, "runtime_env": {},
            "metadata": {"rtjob.test": "queue"}, "entrypoint_num_cpus": 1}


def test_runs_are_admitted_by_priority_then_arrival_with_no_client_alive(cluster_env, backend, tmp_path: Path) -> None:
    api = JobsAPI(cluster_env)
    ref = QueueRef(new_id("q"), str(tmp_path / "storage"))
    hold(ref, "test")  # all four are queued before the keeper may admit any
    ids = {name: new_id(name) for name in ("late", "early", "urgent", "first")}
    enqueue(ref, ids["early"], body(ids["early"]), SHAPE, user="ann", job="j", enqueued_at=100.0)
    enqueue(ref, ids["late"], body(ids["late"]), SHAPE, user="bob", job="j", enqueued_at=200.0)
    enqueue(ref, ids["urgent"], body(ids["urgent"]), SHAPE, user="bob", job="j", priority=10, enqueued_at=300.0)
    enqueue(ref, ids["first"], body(ids["first"]), SHAPE, user="ann", job="j", enqueued_at=50.0)  # a pipeline's
    keeper = ensure_keeper(backend, ref, SimpleNamespace(max_running=1, policy="best-effort", max_skips=3,
                                                         max_running_per_user=None))
    try:
        wait_for(lambda: (v := read(ref)).keeper_alive and v.entries[0].position == 1, 120, "the keeper to order them")
        assert ensure_keeper(backend, ref) == keeper  # alive: a second carrying command starts none
        view = read(ref)
        assert view.held and [(e.id, e.position) for e in view.entries] == [
            (ids["urgent"], 1), (ids["first"], 2), (ids["early"], 3), (ids["late"], 4)]
        assert view.entries[1].reason.endswith("the queue is held; behind priority 10"), view.entries[1].reason
        release(ref, "test")
        for name in ids.values():
            assert wait_for(ended(api, name), 120, f"{name} to end") == "SUCCEEDED"
        starts = sorted(ids, key=lambda n: api.job(ids[n])["start_time"])
        assert starts == ["urgent", "first", "early", "late"]
        wait_for(lambda: not read(ref).entries, 60, "the queue to empty")
    finally:
        api.stop(keeper)


def test_a_keeper_killed_mid_admission_is_replaced_and_the_run_admitted_once(cluster_env, backend,
                                                                             tmp_path: Path) -> None:
    api = JobsAPI(cluster_env)
    ref = QueueRef(new_id("q"), str(tmp_path / "storage"))
    unsent, sent = new_id("unsent"), new_id("sent")
    for run in (unsent, sent):
        enqueue(ref, run, body(run), SHAPE, user="ann", job="j")
    # What a keeper killed between its two writes leaves: both admitted in the state, neither marked submitted;
    # it had reached Ray with one of them; its lease ran out.
    from rtjob.queue.fold import fold
    from rtjob.queue.keeper import Keeper

    objects = ref.objects()
    dead = Keeper(objects, ref.name, cluster=None, holder="rtjob-keeper-x-1", limits=None)  # type: ignore[arg-type]
    state = State(ref.name)
    fold(state, dead.intents(state))
    for entry in state.entries:
        entry.status, entry.admitted_at = ADMITTED, 1.0
    dead.write(state, None)
    objects.put(leases.LEASE, leases.dumps({"holder": "rtjob-keeper-x-1", "beat": 1.0, "ttl": 30.0}))
    posted = requests.post(f"{api.address}/api/jobs/", json=body(sent), timeout=30,
                           headers={"Authorization": f"Bearer {api.token}"})
    assert posted.status_code == 200, posted.text
    keeper = ensure_keeper(backend, ref)
    try:
        assert keeper.endswith("-2")  # the next one after the lease's holder
        for run in (unsent, sent):
            assert wait_for(ended(api, run), 120, f"{run} to end") == "SUCCEEDED"
        wait_for(lambda: not read(ref).entries, 60, "the queue to empty")
        for run in (unsent, sent):
            assert api.logs(run).splitlines().count("ran") == 1  # one driver each: Ray refused a second submission
        raw = objects.get(STATE, 1 << 20)
        assert raw is not None and not State.from_bytes(raw.data, ref.name).entries
    finally:
        api.stop(keeper)


def test_a_queued_runs_code_collected_by_ray_is_put_back_at_admission(cluster_env, backend, tmp_path: Path) -> None:
    """The run's package is in the queue's storage only, the cluster's GCS lacks it (as after Ray collected an
    upload no job referenced for 10 minutes): the keeper puts it back at admission and the run runs its code. A
    sealed package (secrets: never in the queue's storage) the keeper saw while the run waited is put back from
    the keeper's memory; one it never saw leaves the run out of the queue, told why."""
    from ray._private.runtime_env.packaging import create_package, get_uri_for_directory

    api = JobsAPI(cluster_env)
    ref = QueueRef(new_id("q"), str(tmp_path / "storage"))
    code = tmp_path / "code"
    code.mkdir()
    (code / "main.py").write_text(f"print('code {os.urandom(4).hex()}')\n")
    uri = get_uri_for_directory(str(code), True)
    package = uri[len("gcs://"):]
    create_package(str(code), tmp_path / package, include_gitignore=True)
    ref.objects().put_file(f"code/{package}", str(tmp_path / package))
    assert api.get(f"/api/packages/gcs/{package}").status_code == 404  # the cluster does not have it
    run = new_id("coded")
    enqueue(ref, run, {**body(run), "entrypoint": "python main.py", "runtime_env": {"working_dir": uri}}, SHAPE,
            user="ann", job="j")
    keeper = ensure_keeper(backend, ref)
    try:
        assert wait_for(ended(api, run), 120, f"{run} to end") == "SUCCEEDED"
        assert (code / "main.py").read_text().strip()[7:-2] in api.logs(run)
        # A sealed package (client-held secrets) is never kept in the queue's storage: once Ray collected it, the
        # run leaves the queue told why, and never reaches Ray to fail there.
        sealed, gone = new_id("sealed"), f"gcs://_ray_pkg_{os.urandom(8).hex()}.zip"
        enqueue(ref, sealed, {**body(sealed), "runtime_env": {"working_dir": uri, "py_modules": [gone]},
                              SEALED_URI: gone}, SHAPE, user="ann", job="j")
        wait_for(lambda: f"{sealed}: its sealed secrets ({gone}) collected by Ray" in api.logs(keeper), 120,
                 "the keeper to drop the run whose sealed package is gone")
        assert api.job(sealed) is None
        # One the keeper saw while it waited is held in the keeper's memory: collected by Ray (its KV entry deleted,
        # as Ray's collection does) while the queue is held, it is put back at admission and the run reads it.
        kept, marker = new_id("kept"), os.urandom(6).hex()
        folder = tmp_path / "sealed" / "rtjob_sealed"
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text(f"MARK = {marker!r}\n")
        uri = get_uri_for_directory(str(folder), False)
        zipped = tmp_path / uri[len("gcs://"):]
        create_package(str(folder), zipped, include_gitignore=True, include_parent_dir=True)  # as Ray's py_modules
        put = api.put_package(zipped.name, zipped.read_bytes())
        assert put.status_code == 200, put.text
        hold(ref, "test")
        enqueue(ref, kept, {**body(kept), "entrypoint": "python -c 'import rtjob_sealed; print(rtjob_sealed.MARK)'",
                            "runtime_env": {"py_modules": [uri]}, SEALED_URI: uri}, SHAPE, user="ann", job="j")
        wait_for(lambda: any(e.id == kept and e.position for e in read(ref).entries), 120, "the keeper to see it")
        collect = new_id("collect")
        api.submit(collect, "python -c \"import ray; ray.init(); from ray.experimental.internal_kv import "
                            f"_internal_kv_del; _internal_kv_del('{uri}')\"")
        assert wait_for(ended(api, collect), 120, "the package collected") == "SUCCEEDED", api.logs(collect)
        assert api.get(f"/api/packages/gcs/{uri[len('gcs://'):]}").status_code == 404
        release(ref, "test")
        assert wait_for(ended(api, kept), 120, f"{kept} to end") == "SUCCEEDED", api.logs(keeper)[-2000:]
        assert marker in api.logs(kept)
    finally:
        api.stop(keeper)



def test_a_planned_request_is_queued_with_its_code_kept_and_runs(cluster_env, backend, tmp_path: Path) -> None:
    """enqueue_planned (what `submit --queue` calls): the request's working dir is uploaded, its zip kept in the
    queue's storage under Ray's own name, and the keeper submits exactly that body."""
    from rtjob.backends.ray.request import RayJobRequest
    from rtjob.queue.client import enqueue_planned

    api = JobsAPI(cluster_env)
    ref = QueueRef(new_id("q"), str(tmp_path / "storage"))
    code = tmp_path / "work"
    code.mkdir()
    (code / "main.py").write_text("print('planned ' + 'code')\n")
    run = new_id("planned")
    request = RayJobRequest(run_id=run, job_file="j.yaml", notes=[], entrypoint="python main.py",
                            runtime_env={"working_dir": str(code)}, entrypoint_num_cpus=1)
    enqueue_planned(backend, ref, request, SHAPE, user="ann", job="j")
    kept = [x.rel for x in ref.objects().list("code")]
    assert len(kept) == 1 and kept[0].startswith("code/_ray_pkg_"), kept
    keeper = ensure_keeper(backend, ref)
    try:
        assert wait_for(ended(api, run), 120, f"{run} to end") == "SUCCEEDED"
        assert "planned code" in api.logs(run)
        assert api.job(run)["runtime_env"]["working_dir"] == f"gcs://{kept[0][len('code/'):]}"
    finally:
        api.stop(keeper)


def test_a_retry_keeps_its_admission(cluster_env, backend, tmp_path: Path) -> None:
    """max_running 1: the first run's driver is killed (SIGKILL, a retriable end); the supervisor the keeper started
    for it submits its retry, and the next queued run is admitted only after that retry ended."""
    api = JobsAPI(cluster_env)
    ref = QueueRef(new_id("q"), str(tmp_path / "storage"))
    marker = tmp_path / "first-attempt-ran"
    flaky, nxt = new_id("flaky"), new_id("next")
    script = f"if [ -e {marker} ]; then echo retried; else touch {marker}; kill -9 $$; fi"
    enqueue(ref, flaky, {**body(flaky), "entrypoint": f"sh -c '{script}'",
                         "metadata": {"rtjob.max_retries": "1"}}, SHAPE, user="ann", job="j", enqueued_at=1.0)
    enqueue(ref, nxt, body(nxt), SHAPE, user="ann", job="j", enqueued_at=2.0)
    keeper = ensure_keeper(backend, ref, SimpleNamespace(max_running=1))
    try:
        assert wait_for(ended(api, nxt), 180, f"{nxt} to end") == "SUCCEEDED"
        assert api.status(flaky) == "FAILED" and api.status(f"{flaky}-retry1") == "SUCCEEDED"
        assert api.job(nxt)["start_time"] >= api.job(f"{flaky}-retry1")["end_time"]
    finally:
        api.stop(keeper)
        for supervisor in (f"{flaky}-supervisor",):
            if api.status(supervisor) not in (None, "SUCCEEDED", "FAILED", "STOPPED"):
                api.stop(supervisor)
