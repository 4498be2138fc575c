"""The embedded cluster beside Ray's own tools (issue 24 items 6 and 7): the job's runtime_env carries the
cluster's GCS address as RAY_ADDRESS (the job's own value wins), `rtjob local env` points Ray's CLI at it, an
address equal to its dashboard stays the `local` backend, and render describes the cluster that runs. Offline:
the running cluster is a recorded state and a faked node list; nothing is started or contacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import in_process
from support.scrub import scrub

DASHBOARD, GCS = "http://127.0.0.1:18265", "127.0.0.1:16379"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a job that declares no worker shape, a private RTJOB_HOME, no Ray settings around."""
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "rtjob.toml").write_text("")
    (folder / "jobs").mkdir()
    (folder / "jobs" / "train.yaml").write_text("name: train\nentrypoint: python train.py\nlocal: {cpus_per_node: 2}\n")
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An embedded cluster of 2 nodes × 2 CPU, as its state file and dashboard would tell."""
    from rtjob.backends.ray import cluster

    state = cluster.LocalCluster(address=DASHBOARD, gcs_address=GCS, temp_dir=str(tmp_path / "ray"),
                                 token_path=str(tmp_path / "token"), cpus_per_node=2, started_at=0.0)
    (tmp_path / "token").write_text("t0ken")
    monkeypatch.setattr(cluster, "load_state", lambda: state)
    monkeypatch.setattr(cluster, "alive_nodes", lambda found: [{"resources_total": {"CPU": 2.0}}] * 2)
    return state


def render(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    proc = in_process(capsys, "render", "train", "--backend", "local", "-o", "json", *args)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_the_jobs_runtime_env_gets_the_running_clusters_gcs_address(project, running, capsys) -> None:
    data = render(capsys)
    assert data["submit_job"]["runtime_env"]["env_vars"]["RAY_ADDRESS"] == GCS
    own = render(capsys, "--env", "RAY_ADDRESS=10.0.0.1:6379")  # the job's own value wins
    assert own["submit_job"]["runtime_env"]["env_vars"]["RAY_ADDRESS"] == "10.0.0.1:6379"


def test_a_cluster_not_running_yet_is_said_and_its_address_set_when_sent(project, capsys, monkeypatch) -> None:
    from rtjob.backends import configured, get_backend
    from rtjob.backends.ray import backend as ray_backend
    from rtjob.backends.ray import cluster
    from rtjob.backends.ray.request import RayJobRequest

    data = render(capsys)
    assert "RAY_ADDRESS" not in data["submit_job"]["runtime_env"]["env_vars"]
    assert any("RAY_ADDRESS" in note for note in data["notes"])
    sent: list[RayJobRequest] = []
    monkeypatch.setattr(ray_backend.RayJobsBackend, "_submit_new", lambda self, request: sent.append(request))
    backend = get_backend(configured({"backend": "local"}))
    started = cluster.LocalCluster(address=DASHBOARD, gcs_address=GCS, temp_dir="/tmp/rtjob-ray-x",
                                   token_path=str(project / "token"), cpus_per_node=1, started_at=0.0)
    (project / "token").write_text("t0ken")
    backend._connect(started)  # what prepare does once the cluster runs
    ours = RayJobRequest("r1", "train.yaml", [], "python train.py", {"env_vars": {"RAY_ADDRESS": "127.0.0.1:1"}},
                         cluster_ray_address=True)  # planned while another (now gone) cluster ran
    theirs = RayJobRequest("r2", "train.yaml", [], "python train.py", {"env_vars": {"RAY_ADDRESS": "10.0.0.1:6379"}})
    backend._submit_new(ours)
    backend._submit_new(theirs)
    assert [r.runtime_env["env_vars"]["RAY_ADDRESS"] for r in sent] == [GCS, "10.0.0.1:6379"]


def test_local_env_points_rays_own_cli_at_the_embedded_cluster(project, running, capsys) -> None:
    proc = in_process(capsys, "local", "env")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"export RAY_API_SERVER_ADDRESS={DASHBOARD}", f"export RAY_ADDRESS={GCS}",
        "export RAY_AUTH_MODE=token", f"export RAY_AUTH_TOKEN_PATH={running.token_path}",
    ]


def test_local_env_without_a_running_cluster_is_exit_3(project, capsys) -> None:
    proc = in_process(capsys, "local", "env")
    assert proc.returncode == 3 and "not running" in proc.stderr and not proc.stdout


@pytest.mark.parametrize("how", ["ray_api", "ray_both", "rtjob"])
def test_the_embedded_clusters_own_address_stays_the_local_backend(project, running, monkeypatch, how) -> None:
    """After `eval "$(rtjob local env)"` rtjob still runs on the embedded cluster, with its storage; any other
    address is a Ray cluster."""
    from rtjob.backends import configured

    variable = {"ray_api": "RAY_API_SERVER_ADDRESS", "ray_both": "RAY_ADDRESS", "rtjob": "RTJOB_ADDRESS"}[how]
    monkeypatch.setenv(variable, DASHBOARD + "/")
    if variable == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_API_SERVER_ADDRESS", DASHBOARD)  # as `local env` sets them: the dashboard first
    settings = configured({})
    assert settings.get("backend") == "local", settings.source("backend")
    assert "embedded cluster" in settings.source("backend")
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    if variable != "RAY_API_SERVER_ADDRESS":
        assert configured({}).get("backend") == "ray"


def test_an_address_is_a_ray_cluster_while_no_embedded_cluster_runs(project, monkeypatch) -> None:
    from rtjob.backends import configured

    monkeypatch.setenv("RAY_ADDRESS", DASHBOARD)
    assert configured({}).get("backend") == "ray"


def test_render_describes_the_embedded_cluster_that_runs(project, running, capsys) -> None:
    """A running cluster keeps its size: render once said '1 node(s) × 2 CPU' while 2 nodes ran."""
    data = render(capsys)
    assert data["run"]["cluster"] == {"running": True, "nodes": 2, "cpus": 4.0}
    text = in_process(capsys, "render", "train", "--backend", "local").stdout
    assert "the embedded cluster runs 2 node(s), 4 CPU in all" in text and "offers" not in text
    grown = in_process(capsys, "render", "train", "--backend", "local", "--nodes", "3").stdout
    assert "submit adds 1 node(s) × 2 CPU" in grown


def test_render_describes_what_submit_would_start_when_none_runs(project, capsys) -> None:
    assert render(capsys)["run"]["cluster"] == {"running": False}
    text = in_process(capsys, "render", "train", "--backend", "local", "--nodes", "2").stdout
    assert "submit starts the embedded cluster with 2 node(s) × 2 CPU" in text


def test_local_status_without_a_cluster_is_an_answer_not_an_error(project, capsys) -> None:
    """No cluster recorded: "not running", exit 0 (a status question answered), in text and JSON."""
    text = in_process(capsys, "local", "status")
    assert text.returncode == 0 and text.stdout.startswith("not running") and not text.stderr, text
    data = in_process(capsys, "local", "status", "-o", "json")
    assert data.returncode == 0 and json.loads(data.stdout) == {"running": False}, data


def test_local_status_of_a_running_cluster(project, running, capsys) -> None:
    proc = in_process(capsys, "local", "status", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["running"] is True and data["nodes"] == 2 and data["cpus"] == 4 and data["address"] == DASHBOARD


def test_local_status_of_a_damaged_state_is_exit_3(project, tmp_path, monkeypatch, capsys) -> None:
    """A state file that is not JSON, or that names a cluster whose processes are gone: exit 3, one line that
    says `rtjob local down` clears it."""
    from rtjob.backends.ray import cluster

    state_file = tmp_path / "home" / "local" / "cluster.json"
    state_file.parent.mkdir(parents=True)
    state_file.write_text("{not json")
    proc = in_process(capsys, "local", "status")
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1 and "is damaged (it is not JSON)" in proc.stderr

    gone = cluster.LocalCluster(address=DASHBOARD, gcs_address=GCS, temp_dir=str(tmp_path / "ray"),
                                token_path=str(tmp_path / "token"), cpus_per_node=1, started_at=0.0)
    monkeypatch.setattr(cluster, "load_state", lambda: gone)
    monkeypatch.setattr(cluster, "alive_nodes", lambda found: None)  # its dashboard does not answer...
    for output in ("text", "json"):
        proc = in_process(capsys, "local", "status", "-o", output)
        assert proc.returncode == 3 and not proc.stdout, proc  # ...and no process of it runs: gone
        assert "the cluster it records is gone" in proc.stderr and "rtjob local down" in proc.stderr, proc.stderr
