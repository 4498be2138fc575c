"""A job's shape: what a job that declares none gets (the machine's CPUs on the embedded cluster, no invented
worker count), command-line overrides winning over the job and its compute config, the pre-check using the
overridden shape, the stuck-run watch, and the closing line of a run stopped by its time limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import REPO, record
from support.scrub import scrub

import rtjob_contract as contract

SHAPE_ENV = {contract.ENV_NODES, contract.ENV_NUM_WORKERS, contract.ENV_CPUS_PER_WORKER,
             contract.ENV_GPUS_PER_WORKER, contract.ENV_USE_GPU}
CPU_CONFIG = """\
head_node: {instance_type: m5.xlarge}
worker_nodes:
  - {name: cpu-workers, instance_type: m5.xlarge, min_nodes: 0, max_nodes: 4}
"""


def render_json(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                home: Path) -> dict[str, Any]:
    """`rtjob render ... -o json` through the console script's own entry point, in this process."""
    from rtjob.commands import main
    from rtjob.core import redact

    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(home))
    monkeypatch.chdir(cwd)
    redact.REDACTOR.clear()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["render", *args, "-o", "json"])
    out, err = capsys.readouterr()
    record(out, err)
    assert exited.value.code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.fixture
def render(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Any:
    return lambda args, cwd=REPO: render_json(args, cwd, monkeypatch, capsys, tmp_path / "home")


@pytest.fixture
def two_line_job(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    job = folder / "train.yaml"
    job.write_text("name: train\nentrypoint: python train.py --num-workers 2\n")
    return job


def _env(data: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = data["submit_job"]["runtime_env"]["env_vars"]
    return env


def test_a_job_without_a_shape_gets_the_machines_cpus_and_no_invented_worker_count(render, two_line_job,
                                                                                   monkeypatch):
    from rtjob.jobspec import resolve

    monkeypatch.setattr(resolve, "machine_cpus", lambda: 12)
    data = render([str(two_line_job), "--backend", "local"], cwd=two_line_job.parent)
    assert data["run"]["shape"] == "set by the entrypoint"
    assert data["run"]["workers"] is None and data["run"]["nodes"] is None
    assert data["run"]["cpus_per_node"] == 12
    assert not SHAPE_ENV & set(_env(data))
    assert {contract.META_NODES, contract.META_WORKERS}.isdisjoint(data["submit_job"]["metadata"])


@pytest.mark.parametrize("flags,nodes,cpus", [
    (["--set", "resources_per_worker.cpus=1"], 1, 1),
    (["--set", "resources_per_worker.cpus=1", "--nodes", "2", "--set", "local.cpus_per_node=2"], 2, 2),
    (["--compute-config", "g5-4xlarge", "--nodes", "2"], 2, 1),  # the embedded cluster's 1 CPU per node
])
def test_a_declared_shape_is_shown_and_exported(render, two_line_job, flags, nodes, cpus):
    data = render([str(two_line_job), "--backend", "local", *flags], cwd=two_line_job.parent)
    assert "shape" not in data["run"] and data["run"]["nodes"] == nodes
    assert data["run"]["workers"] == nodes * cpus
    assert _env(data)[contract.ENV_NUM_WORKERS] == str(nodes * cpus)


@pytest.mark.parametrize("flags,cpus", [(["--nodes", "2"], 1), (["--nodes", "2", "--set", "local.cpus_per_node=2"], 2),
                                        (["--set", "local.cpus_per_node=3"], 3)])
def test_nodes_and_cpus_per_node_size_the_cluster_not_the_scripts_workers(render, two_line_job, flags, cpus):
    """A self-sizing script under `--nodes 2` and `local.cpus_per_node: 2` runs its own worker count: rtjob
    neither shows nor exports one (it once said 4 workers while the script ran 2); the cluster is sized."""
    data = render([str(two_line_job), "--backend", "local", *flags], cwd=two_line_job.parent)
    assert data["run"]["shape"] == "set by the entrypoint" and data["run"]["workers"] is None
    assert data["run"]["cpus_per_node"] == cpus
    assert not SHAPE_ENV & set(_env(data))


def test_the_embedded_node_size_follows_the_shape(two_line_job, monkeypatch, tmp_path):
    """prepare starts (or grows) the embedded cluster with the resolved node size."""
    from rtjob.backends import backend_class, configured
    from rtjob.backends.ray import cluster
    from rtjob.backends.ray import embedded_backend as ray_backend
    from rtjob.jobspec import resolve as resolve_mod
    from rtjob.jobspec.resolve import Overrides, resolve

    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(resolve_mod, "machine_cpus", lambda: 6)
    asked: list[tuple[int, int]] = []

    class Running:
        token, address = "t0ken", "http://127.0.0.1:1"

    def fake_up(nodes: int, cpus_per_node: int, log: Any = None, gpus_per_node: int = 0) -> Running:
        asked.append((nodes, cpus_per_node))
        return Running()

    monkeypatch.setattr(cluster, "up", fake_up)
    settings = configured({"backend": "local"}, two_line_job.parent)
    placement = backend_class("local").placement()
    for overrides in (Overrides(), Overrides(nodes=2), Overrides(sets=("local.cpus_per_node=4",))):
        job = resolve(str(two_line_job), settings, overrides, placement)
        ray_backend.EmbeddedRayBackend(settings).prepare(job, lambda _: None)
    assert asked == [(1, 6), (2, 1), (1, 4)]


def test_gpus_0_on_the_command_line_beats_the_compute_configs_gpus(render):
    base = render(["ddp-resnet", "--backend", "ray", "--address", "http://127.0.0.1:9"])
    assert base["run"]["resources_per_worker"] == {"CPU": 1, "GPU": 1}
    data = render(["ddp-resnet", "--backend", "ray", "--address", "http://127.0.0.1:9",
                   "--set", "resources_per_worker.gpus=0"])
    assert data["run"]["resources_per_worker"] == {"CPU": 1}
    assert data["run"]["workers"] == base["run"]["workers"] == 2
    assert _env(data)[contract.ENV_USE_GPU] == "0" and _env(data)[contract.ENV_GPUS_PER_WORKER] == "0"


def test_a_cpu_compute_config_and_nodes_from_the_command_line(render, tmp_path):
    project = tmp_path / "proj"
    (project / "jobs").mkdir(parents=True)
    (project / "compute_configs").mkdir()
    (project / "jobs" / "ddp-resnet.yaml").write_text((REPO / "jobs" / "ddp-resnet.yaml").read_text())
    (project / "jobs" / "requirements-train.txt").write_text((REPO / "jobs" / "requirements-train.txt").read_text())
    (project / "compute_configs" / "cpu-only.yaml").write_text(CPU_CONFIG)
    data = render(["ddp-resnet", "--backend", "ray", "--address", "http://127.0.0.1:9",
                   "--compute-config", "cpu-only", "--nodes", "3", "--set", "resources_per_worker.cpus=2"], cwd=project)
    assert data["run"]["compute_config"] == "cpu-only"
    assert data["run"]["resources_per_worker"] == {"CPU": 2}
    assert data["run"]["nodes"] == 3 and data["run"]["workers"] == 6  # m5.xlarge: 4 vCPUs = 2 workers of 2
    assert _env(data)[contract.ENV_USE_GPU] == "0"


class FakeAPI:
    """The dashboard answers precheck and the stuck check need: two CPU-only nodes, a job's pending demands."""

    address = "http://127.0.0.1:9"
    headers: dict[str, str] = {}
    verify = True

    def __init__(self, pending: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.pending = pending or {}

    def nodes(self) -> list[dict[str, Any]]:
        node = {"state": "ALIVE", "resources_total": {"CPU": 2.0, "memory": 1e9, "node:127.0.0.1": 1.0}}
        return [node, dict(node)]

    def has_autoscaler(self) -> bool | None:
        return False

    def job(self, run_id: str) -> dict[str, Any]:
        return {"submission_id": run_id, "job_id": "02000000", "status": "RUNNING"}

    def get_json(self, path: str, params: Any = None) -> dict[str, Any]:
        kind = path.rsplit("/", 1)[-1]
        return {"data": {"result": {"result": self.pending.get(kind, [])}}}


def _ray_backend(api: FakeAPI) -> Any:
    from rtjob.backends import configured
    from rtjob.backends.ray.backend import RayJobsBackend

    backend = RayJobsBackend(configured({"backend": "ray", "address": api.address}, REPO))
    backend._api = api  # type: ignore[assignment]
    return backend


def test_precheck_uses_the_overridden_shape(monkeypatch, tmp_path):
    from rtjob.backends import configured
    from rtjob.backends.ray.backend import RayJobsBackend
    from rtjob.core.errors import BadInput
    from rtjob.jobspec.resolve import Overrides, resolve

    monkeypatch.setenv("RTJOB_HOME", str(tmp_path))
    monkeypatch.chdir(REPO)
    backend = _ray_backend(FakeAPI())
    settings = configured({"backend": "ray", "address": "http://127.0.0.1:9"}, REPO)
    gpu = resolve("ddp-resnet", settings, Overrides(), RayJobsBackend.placement())
    with pytest.raises(BadInput, match="can never fit"):
        backend.precheck(gpu)
    cpu = resolve("ddp-resnet", settings, Overrides(sets=("resources_per_worker.gpus=0",)), RayJobsBackend.placement())
    assert backend.precheck(cpu) == []


GPU_GROUP = {"placement_group_id": "pg1", "state": "PENDING",
             "bundles": [{"bundle_id": i, "unit_resources": {"CPU": 1.0, "GPU": 1.0}} for i in range(2)]}


def test_stuck_names_what_a_pending_placement_group_lacks():
    backend = _ray_backend(FakeAPI({"placement_groups": [GPU_GROUP]}))
    stuck = backend.stuck("r1")
    assert stuck is not None and stuck.final
    assert stuck.reason == ("{CPU: 1, GPU: 1} × 2 (placement group) that this cluster does not have "
                            "(GPU: needs 2, cluster has 0)")


def test_stuck_ignores_demands_the_cluster_can_meet_and_placement_group_resources():
    fits = {"placement_group_id": "pg2", "bundles": [{"unit_resources": {"CPU": 1.0}}] * 2}
    in_group = {"class_name": "RayTrainWorker", "required_resources": {"CPU_group_0_pg2": 1.0, "CPU_group_pg2": 1.0}}
    assert _ray_backend(FakeAPI({"placement_groups": [fits], "actors": [in_group]})).stuck("r1") is None
    task = {"name": "big", "required_resources": {"CPU": 3.0}}  # more than one node has
    stuck = _ray_backend(FakeAPI({"tasks": [task]})).stuck("r1")
    assert stuck is not None and stuck.reason.startswith("{CPU: 3} (task big)")


class StuckBackend:
    """A backend whose run stays RUNNING and waits for what the cluster lacks, until it is stopped."""

    name = "ray"

    def __init__(self, final: bool) -> None:
        from rtjob.backends.base import Stuck
        from rtjob.core.model import RunInfo, RunStatus

        self.final = final
        self.info = RunInfo(id="r1", job="j", backend="ray", status=RunStatus.RUNNING)
        self.stuck_answer = Stuck("{GPU: 1} × 2 (placement group) that this cluster does not have", final)
        self.stops = 0
        self.polls = 0

    def status(self, run_id: str) -> Any:
        from rtjob.core.model import RunStatus

        self.polls += 1
        if not self.final and self.polls > 20:  # the autoscaler added the GPUs: the run ends by itself
            self.info.status = RunStatus.SUCCEEDED
        return self.info

    def stuck(self, run_id: str) -> Any:
        return self.stuck_answer

    def stop(self, run_id: str) -> Any:
        from rtjob.core.model import RunStatus

        self.stops += 1
        self.info.status = RunStatus.STOPPED
        return self.info


def _fast(monkeypatch: pytest.MonkeyPatch, grace: str) -> None:
    from rtjob.runs.lifecycle import follow, stuck_watch

    monkeypatch.setattr(follow, "POLL_S", 0.01)
    monkeypatch.setattr(stuck_watch, "STUCK_POLL_S", 0.0)
    monkeypatch.setenv("RTJOB_STUCK_GRACE_S", grace)


def test_a_run_that_waits_in_vain_is_stopped_after_the_grace_period(monkeypatch):
    from rtjob.runs.lifecycle.follow import follow
    from rtjob.runs.lifecycle.stuck_watch import NeverFits

    _fast(monkeypatch, "0.05")
    backend = StuckBackend(final=True)
    heard: list[str] = []
    with pytest.raises(NeverFits) as raised:
        follow(backend, "r1", out=None, notice=heard.append)  # type: ignore[arg-type]
    assert raised.value.exit_code == 2 and backend.stops == 1
    assert "run r1 was stopped: it waited for {GPU: 1} × 2" in raised.value.message
    assert heard[0].startswith("r1 waits for {GPU: 1} × 2") and "stopping it in 0s" in heard[0]


def test_a_wait_that_ended_does_not_count_towards_a_later_one(monkeypatch):
    """A run that waited, got its resources and later waits again (Ray Train re-creating its worker group)
    gets a whole grace period for the new wait."""
    import asyncio

    from rtjob.runs.lifecycle import stuck_watch

    _fast(monkeypatch, "100")
    backend = StuckBackend(final=True)
    clock = [1000.0]
    monkeypatch.setattr(stuck_watch.time, "monotonic", lambda: clock[0])
    watch = stuck_watch.StuckWatch(backend, "r1", notice=None)  # type: ignore[arg-type]
    asyncio.run(watch.check(backend.info))  # waits from t=1000
    backend.stuck_answer = None
    clock[0] += 600
    asyncio.run(watch.check(backend.info))  # got it
    backend.stuck_answer = StuckBackend(final=True).stuck_answer
    clock[0] += 10
    asyncio.run(watch.check(backend.info))  # waits again, from t=1610
    clock[0] += 50
    asyncio.run(watch.check(backend.info))  # 50 s into the new wait: within its grace
    assert backend.stops == 0
    clock[0] += 60
    with pytest.raises(stuck_watch.NeverFits):
        asyncio.run(watch.check(backend.info))  # 110 s: past the grace
    assert backend.stops == 1


def test_the_checks_back_off_only_after_a_runs_first_minutes(monkeypatch):
    """A run asks for its workers after its imports (slow on a busy node): checks backed off by then would stop
    a run that can never start minutes late; a run long past its start is asked less and less often."""
    import asyncio

    from rtjob.runs.lifecycle import stuck_watch

    backend = StuckBackend(final=True)
    backend.stuck_answer = None
    clock = [1000.0]
    monkeypatch.setattr(stuck_watch.time, "monotonic", lambda: clock[0])
    watch = stuck_watch.StuckWatch(backend, "r1", notice=None)  # type: ignore[arg-type]
    gaps = []
    while clock[0] < 1000 + stuck_watch.STUCK_EARLY_S + 400:
        clock[0] = watch.next_check
        asyncio.run(watch.check(backend.info))
        gaps.append(watch.next_check - clock[0])
    early = int(stuck_watch.STUCK_EARLY_S // stuck_watch.STUCK_POLL_S) - 1
    assert set(gaps[:early]) == {stuck_watch.STUCK_POLL_S}
    assert gaps[early] == 2 * stuck_watch.STUCK_POLL_S and gaps[-1] == stuck_watch.STUCK_POLL_MAX_S


def test_on_a_cluster_that_can_grow_the_wait_is_reported_once_and_the_run_left_alone(monkeypatch):
    from rtjob.core.model import RunStatus
    from rtjob.runs.lifecycle.follow import follow

    _fast(monkeypatch, "0")
    backend = StuckBackend(final=False)
    heard: list[str] = []
    info = follow(backend, "r1", out=None, notice=heard.append)  # type: ignore[arg-type]
    assert info.status == RunStatus.SUCCEEDED and backend.stops == 0
    assert heard == ["r1 waits for {GPU: 1} × 2 (placement group) that this cluster does not have; "
                     "waiting for the cluster to add nodes"]


@pytest.mark.parametrize("code,seconds,expected", [
    (124, 5, "stopped by its time limit timeout_s=60 (exit code 124)"),
    (137, 95, "stopped by its time limit timeout_s=60 (exit code 137)"),
    (137, 5, None),  # killed early (out of memory): not the time limit
    (1, 95, None),
])
def test_the_closing_line_says_the_time_limit_fired(code, seconds, expected):
    from rtjob.backends.ray.request import time_limit_message

    data = {"entrypoint": "timeout -k 30 60 bash -c 'python train.py'", "driver_exit_code": code,
            "start_time": 1_000, "end_time": 1_000 + seconds * 1000}
    assert time_limit_message(data) == expected
    backend = _ray_backend(FakeAPI())
    info = backend._info({**data, "status": "FAILED", "message": "Job entrypoint command failed with exit code 124"})
    assert (info.message == expected) if expected else info.message.startswith("Job entrypoint")


@pytest.mark.parametrize("running_nodes,asked,noted", [
    (1, (1, 4), True),  # 1 node × 1 CPU running, the job wants 4 CPUs: said, nothing restarted
    (2, (1, 2), False),  # 2 nodes × 1 CPU already offer the 2 CPUs asked for
    (1, (1, 1), False),
])
def test_a_running_embedded_cluster_smaller_than_asked_is_said_not_restarted(monkeypatch, tmp_path, running_nodes,
                                                                            asked, noted):
    import contextlib

    from rtjob.backends.ray import cluster

    running = cluster.LocalCluster(address="http://127.0.0.1:1", gcs_address="127.0.0.1:2", temp_dir=str(tmp_path),
                                   token_path=str(tmp_path / "t"), cpus_per_node=1, started_at=0.0)
    monkeypatch.setattr(cluster, "_locked", lambda say: contextlib.nullcontext())
    monkeypatch.setattr(cluster, "load_state", lambda: running)
    monkeypatch.setattr(cluster, "_reusable", lambda found, say: found)
    monkeypatch.setattr(cluster, "_require_nodes", lambda found, count: [{}] * running_nodes)
    monkeypatch.setattr(cluster, "_start_head", lambda *a: pytest.fail("a running cluster was replaced"))
    monkeypatch.setattr(cluster, "_add_nodes", lambda *a: pytest.fail("no node should be added"))
    heard: list[str] = []
    assert cluster.up(*asked, log=heard.append) is running
    assert bool(heard) == noted
    if noted:
        assert heard == ["the embedded cluster runs with 1 CPU per node, this job asks for 4: `rtjob local down` "
                         "lets the next submit start it at that size"]
