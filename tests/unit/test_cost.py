"""Cost estimates: the catalog's on-demand prices × node counts (render, submit, compute-config show) and
× run duration (status). Every printed figure says region, date and that it is an estimate."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from rtjob.core.model import RunInfo, RunStatus
from rtjob.jobspec import catalog
from rtjob.jobspec.pricing import BASIS, compute_config_cost, run_cost
from rtjob.runs.cost import finished_run_cost
from support.cli import REPO, base_env, run_in_process
from support.prices import PRICED_AS, dollars, g5_4xlarge, listed, price

HEAD, G5_12X, M5_X = price("m5.2xlarge"), price("g5.12xlarge"), price("m5.xlarge")


def test_every_catalog_type_has_a_dated_price() -> None:
    assert re.fullmatch(r"[a-z]{2}-[a-z]+-\d", catalog.PRICES_REGION), catalog.PRICES_REGION
    assert re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])", catalog.PRICES_AS_OF), catalog.PRICES_AS_OF
    for itype in catalog.CATALOG.values():
        assert itype.price_usd_per_hour and itype.price_usd_per_hour > 0, itype.name
    # Within a family, more GPUs (then more vCPUs) never cost less.
    g5 = sorted((t for t in catalog.CATALOG.values() if t.name.startswith("g5.")), key=lambda t: (t.gpus, t.vcpus))
    assert [t.price_usd_per_hour for t in g5] == sorted(t.price_usd_per_hour or 0 for t in g5)
    assert f"AWS on-demand prices, {PRICED_AS}" == BASIS


def test_compute_config_cost_pinned_autoscaling_spot_and_unpriced() -> None:
    head = {"instance_type": "m5.2xlarge"}
    pinned = compute_config_cost({"head_node": head, "worker_nodes": [
        {"name": "gpu-workers", "instance_type": "g5.4xlarge", "min_nodes": 3, "max_nodes": 3}]})
    assert pinned is not None and pinned.fixed and pinned.low == pytest.approx(g5_4xlarge(3))
    assert pinned.text().startswith(f"est. {dollars(g5_4xlarge(3))}/h = head {listed('m5.2xlarge')} + "
                                    f"3 × {listed('g5.4xlarge')} (gpu-workers)")
    scaling = compute_config_cost({"head_node": head, "worker_nodes": [
        {"instance_type": "g5.12xlarge", "min_nodes": 0, "max_nodes": 2, "market_type": "PREFER_SPOT"},
        {"instance_type": "m5.xlarge", "min_nodes": 1, "max_nodes": 1}]})
    assert scaling is not None and not scaling.fixed and scaling.spot
    assert (scaling.low, scaling.high) == pytest.approx((HEAD + M5_X, HEAD + M5_X + 2 * G5_12X))
    assert f"{dollars(HEAD + M5_X)}–{dollars(HEAD + M5_X + 2 * G5_12X)}/h" in scaling.text()
    assert "spot groups priced on-demand" in scaling.text()
    unknown = compute_config_cost({"head_node": head, "worker_nodes": [{"instance_type": "x9.huge", "max_nodes": 2}]})
    assert unknown is not None and unknown.unpriced == ["x9.huge"]
    assert unknown.text().startswith(f"est. ≥ {dollars(HEAD)}/h") and "no price for x9.huge" in unknown.text()
    assert unknown.to_json()["unpriced_instance_types"] == ["x9.huge"]
    assert compute_config_cost(None) is None


def test_run_cost_is_duration_times_rate() -> None:
    rate = compute_config_cost({"head_node": {"instance_type": "m5.2xlarge"}, "worker_nodes": [
        {"instance_type": "g5.4xlarge", "min_nodes": 3, "max_nodes": 3}]})
    assert rate is not None
    info = RunInfo("r", "ddp-resnet", "anyscale", RunStatus.FAILED, start_time="2026-11-02T03:00:00+00:00",
                   end_time="2026-11-02T04:30:00+00:00")
    cost = run_cost(info, rate)
    assert cost is not None and cost["hours"] == 1.5
    assert cost["estimated_usd"] == pytest.approx(round(1.5 * (g5_4xlarge(3)), 2))
    assert cost["text"] == f"est. {dollars(1.5 * g5_4xlarge(3))} (1h30m × {dollars(g5_4xlarge(3))}/h; {BASIS})"
    running = RunInfo("r", "x", "anyscale", RunStatus.RUNNING, start_time="2026-11-02T03:00:00+00:00")
    assert run_cost(running, rate) is None  # only finished runs


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """render --output json on three backends (the CLI in this process; nothing is contacted)."""

    backends = ("local", "ray", "anyscale")
    envs = {b: base_env(tmp_path_factory.mktemp("home"), HOME=str(tmp_path_factory.mktemp("userhome")))
            for b in backends}  # made here: tmp_path_factory is not thread-safe

    def render(backend: str) -> subprocess.CompletedProcess[str]:
        extra = ("--address", "http://127.0.0.1:9") if backend == "ray" else ()
        return run_in_process("render", "ddp-resnet", "--nodes", "3", "--backend", backend, *extra, "--output",
                              "json", env=envs[backend], cwd=REPO)

    procs = {backend: render(backend) for backend in backends}
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr
    return {backend: json.loads(proc.stdout) for backend, proc in procs.items()}


def test_render_shows_cost_per_hour_except_on_the_embedded_cluster(renders: dict[str, dict]) -> None:
    assert renders["local"]["cost"] is None  # the embedded cluster is this machine
    for backend in ("ray", "anyscale"):
        cost = renders[backend]["cost"]
        assert cost["usd_per_hour"] == pytest.approx(g5_4xlarge(3))
        assert cost["breakdown"] == [f"head {listed('m5.2xlarge')}", f"3 × {listed('g5.4xlarge')} (gpu-workers)"]
        assert cost["basis"] == BASIS


def test_compute_config_show_text_states_price_basis(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home", HOME=str(tmp_path / "userhome"))
    proc = run_in_process("compute-config", "show", "g5-12xlarge", env=env)
    assert proc.returncode == 0, proc.stderr
    cost_line = next(line for line in proc.stdout.splitlines() if line.startswith("# cost:"))
    assert f"{dollars(HEAD)}–{dollars(HEAD + 2 * G5_12X)}/h" in cost_line and f"0–2 × {listed('g5.12xlarge')}" in cost_line
    assert PRICED_AS in cost_line and "spot groups priced on-demand" in cost_line


def test_finished_ray_run_is_priced_from_the_shape_recorded_at_submit(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The request records the priced shape (compute config × nodes) in the run's metadata; a finished run
    is priced from that record alone: the job file may have changed or be gone (here: deleted)."""
    import shutil

    from rtjob.backends import configured, get_backend
    from rtjob.jobspec.resolve import Overrides
    from rtjob.runs.runner import plan

    project = tmp_path / "project"
    shutil.copytree(REPO / "jobs", project / "jobs")
    shutil.copytree(REPO / "compute_configs", project / "compute_configs")
    shutil.copytree(REPO / "training", project / "training")
    monkeypatch.delenv("RTJOB_PROJECT", raising=False)
    monkeypatch.chdir(project)
    settings = configured({"backend": "ray", "address": "http://127.0.0.1:9"}, project)
    planned = plan("ddp-resnet", settings, Overrides(nodes=2))
    request = planned.request
    local_settings = configured({"backend": "local"}, project)
    local_request = plan("ddp-resnet", local_settings, Overrides(nodes=2)).request
    shutil.rmtree(project / "compute_configs")  # the run's record must not need today's files
    shutil.rmtree(project / "jobs")
    data = {"submission_id": request.run_id, "status": "SUCCEEDED", "metadata": request.metadata,
            "start_time": 1_793_588_400_000, "end_time": 1_793_595_600_000}  # two hours
    backend = get_backend(settings)
    info = backend._info(data)  # type: ignore[attr-defined]  # how the Ray backend reads a job it is sent back
    cost = finished_run_cost(backend, info)
    assert cost is not None and cost["estimated_usd"] == pytest.approx(2 * (g5_4xlarge(2)), abs=0.01)
    assert "shape of g5-4xlarge at submit, 2 node(s)" in cost["text"]
    # The embedded cluster is this machine: its requests record no rate, so its runs cost nothing.
    local = get_backend(local_settings)
    local_info = local._info({**data, "metadata": local_request.metadata})  # type: ignore[attr-defined]
    assert "rtjob.rate" not in local_request.metadata  # type: ignore[attr-defined]
    assert local_info.rate is None and finished_run_cost(local, local_info) is None
