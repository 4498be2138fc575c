"""Live rows, in process: the step rows rank 0 prints (training/step_rows.py), the system rows a node's sampler
prints (training/system_rows.py), and the companion's collector (rtjob/runside/live_rows.py) that finds them in the
driver log as Ray writes it and appends them to metrics.jsonl / system.jsonl.

No GPU can run here: ``nvidia-smi`` is a fake on PATH (test_gpu_discovery.fake_smi) printing what the real one prints
for the utilisation query; the real one is checked on a GPU machine. The companion run at the end is the real
companion over a local storage folder (as tests/e2e/test_companion.py runs it)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rtjob.runside import logparts
from rtjob.runside.live_rows import LiveRows, both, valid
from rtjob.storage.opening import objects_for
from support.cli import REPO
from test_gpu_discovery import fake_smi

import rtjob_contract as contract
from training import step_rows, system_rows

SMI_LINES = ["0, 87, 30512, 81559", "1, [N/A], 12, 81559"]
SMI_QUERY = "index,utilization.gpu,memory.used,memory.total"
RAY_PREFIX = b"\x1b[36m(RayTrainWorker pid=4242, ip=10.0.0.7)\x1b[0m "


class Said(list[str]):
    def __call__(self, line: str) -> None:
        self.append(line)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rank_0_prints_a_step_row_every_n_steps_with_the_windows_mean_loss(capsys: pytest.CaptureFixture) -> None:
    meter = step_rows.StepMeter(every=2, rank=0, world_size=4)
    meter.epoch_begins(2)
    meter.epoch_length(5)  # a resumed run: epoch 2's first step is the run's 6th
    optimizer = type("Opt", (), {"param_groups": [{"lr": 0.01}]})()
    for loss in (1.0, 3.0, 0.5, 0.25):  # steps 6 to 9
        meter.step_done(loss, samples=8, optimizer=optimizer)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"rtjob-event: {contract.EVENT_STEP_ROW} {{") for line in lines)
    first, second = (json.loads(line.split(" ", 2)[2]) for line in lines)
    assert (first["step"], first["epoch"], first["loss"], first["lr"]) == (6, 2, 1.0, 0.01)
    assert (second["step"], second["loss"]) == (8, 1.75)  # the mean of steps 7 and 8
    assert first["samples_per_s"] > 0 and "gpu_mem_mb" not in first  # 2 steps × 8 samples × 4 ranks / seconds
    assert valid(contract.EVENT_STEP_ROW, first) and valid(contract.EVENT_STEP_ROW, second)


def test_a_sweeps_trial_is_named_in_its_rows_and_kept_by_the_collector(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    meter = step_rows.StepMeter(every=1, rank=0, trial="trial-lr0.001-bs64")
    meter.step_done(0.5, samples=4)
    rows = LiveRows(str(tmp_path), Said())
    rows.feed(capsys.readouterr().out.encode())
    assert [(r["step"], r["trial"]) for r in read_rows(tmp_path / contract.STEP_METRICS_FILE)] == [
        (1, "trial-lr0.001-bs64")]
    assert not valid(contract.EVENT_STEP_ROW, {"step": 1, "time": 1.0, "trial": 3})


def test_other_ranks_and_n_0_print_nothing(capsys: pytest.CaptureFixture) -> None:
    for meter in (step_rows.StepMeter(every=1, rank=1, world_size=2), step_rows.StepMeter(every=0, rank=0)):
        for _ in range(3):
            meter.step_done(1.0, samples=4)
        assert meter.step == 3
    assert capsys.readouterr().out == ""


def test_the_collector_keeps_each_row_once_from_rays_prefixed_and_repeated_lines(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    meter = step_rows.StepMeter(every=1, rank=0)
    meter.epoch_begins(1)
    for loss in (2.0, 1.5):
        meter.step_done(loss, samples=4)
    printed = capsys.readouterr().out.encode().splitlines()
    log = b"".join(RAY_PREFIX + line + b"\n" for line in printed)
    log += printed[0] + b"\n"  # the same line again (two log monitors on one machine)
    log += RAY_PREFIX + printed[1] + b" [repeated 2x across cluster]\n"
    log += b"epoch 1/1 train_loss=1.7\nrtjob-event: first_step\nrtjob-event: step_row {broken\n"
    log += b'rtjob-event: step_row {"step": true, "time": 1}\nrtjob-event: step_row {"step": 3, "time": 1, "loss": "x"}\n'
    log += b"rtjob-event: step_row " + printed[1].split(b" ", 2)[2][:-1]  # a line not ended yet
    rows = LiveRows(str(tmp_path), Said())
    seen: list[bytes] = []
    feed = both(seen.append, rows.feed)
    feed(log)
    got = read_rows(tmp_path / contract.STEP_METRICS_FILE)
    assert [(r["step"], r["loss"], r["epoch"]) for r in got] == [(1, 2.0, 1), (2, 1.5, 1)]
    assert seen == [log] and rows.rows_written == 2
    assert not (tmp_path / contract.SYSTEM_METRICS_FILE).exists()


def test_a_node_sample_reads_cpu_memory_and_every_gpu_from_nvidia_smi(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "bin", SMI_LINES, SMI_QUERY))
    row = system_rows.sample()
    assert row["node"] == system_rows.node_name() and 0 <= row["cpu_percent"] <= 100
    assert 0 < row["mem_used_mb"] < row["mem_total_mb"]
    assert row["gpus"] == [{"index": 0, "util_percent": 87.0, "mem_used_mb": 30512.0, "mem_total_mb": 81559.0},
                           {"index": 1, "util_percent": None, "mem_used_mb": 12.0, "mem_total_mb": 81559.0}]
    assert valid(contract.EVENT_SYSTEM_ROW, row)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi: a CPU node
    assert system_rows.sample()["gpus"] == []


def test_the_companion_samples_its_node_and_keeps_other_nodes_rows(tmp_path: Path) -> None:
    own = {"time": 1.0, "node": "driver-node", "cpu_percent": 5.0, "mem_used_mb": 1.0, "mem_total_mb": 2.0,
           "gpus": []}
    rows = LiveRows(str(tmp_path), Said(), (lambda: dict(own), "driver-node"), every_s=3600)
    rows.tick()
    assert not (tmp_path / contract.SYSTEM_METRICS_FILE).exists()  # not due yet
    rows.tick(final=True)  # the run ends before its first interval: one row anyway
    other = {**own, "node": "worker-node", "gpus": [{"index": 0, "util_percent": 50, "mem_used_mb": 1,
                                                     "mem_total_mb": 2}]}
    rows.feed(b"".join(RAY_PREFIX + f"rtjob-event: {contract.EVENT_SYSTEM_ROW} {json.dumps(r)}\n".encode()
                       for r in (other, own)))  # a worker's row about the driver's node: already sampled
    assert [r["node"] for r in read_rows(tmp_path / contract.SYSTEM_METRICS_FILE)] == ["driver-node", "worker-node"]


def test_the_sampler_thread_prints_a_system_row_each_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker-side sampler, in a process of its own (one per process, a daemon thread)."""
    path = fake_smi(tmp_path / "bin", SMI_LINES, SMI_QUERY)
    code = ("import time\nfrom training import system_rows\nsystem_rows.start_sampler(0.2)\n"
            "system_rows.start_sampler(0.2)\ntime.sleep(0.7)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PATH": path, "PYTHONPATH": str(REPO)}, check=True).stdout
    rows = LiveRows(str(tmp_path), Said())
    rows.feed(out.encode())
    got = read_rows(tmp_path / contract.SYSTEM_METRICS_FILE)
    assert 2 <= len(got) <= 4 and all(len(r["gpus"]) == 2 for r in got)  # one a 0.2 s, not two (one thread)


def test_new_log_output_is_due_for_a_part_soon_and_a_line_not_ended_backs_off(tmp_path: Path) -> None:
    source = tmp_path / "driver.log"
    source.write_bytes(b"")
    parts = logparts.LogParts(str(source), objects_for(str(tmp_path / "run")), "r1", [], Said())
    try:
        now = time.monotonic()
        assert not parts.due(now)
        source.write_bytes(b"a line\n")
        assert not parts.due(now)  # first seen: wait for the rest of a burst
        assert parts.due(now + logparts.NEW_OUTPUT_S)
        assert parts.flush() == 1
        assert parts.flush() == 0  # nothing new: no back-off
        now = time.monotonic()
        with open(source, "ab") as f:
            f.write(b"another\n")
        assert not parts.due(now) and not parts.due(now + logparts.NEW_OUTPUT_S)  # a part a PART_GAP_S at most
        assert parts.due(now + logparts.PART_GAP_S)
        assert parts.flush() == 1
        with open(source, "ab") as f:
            f.write(b"\r 10% progress")  # no line end
        now = time.monotonic()
        parts.due(now)
        assert parts.due(now + logparts.PART_GAP_S) and parts.flush() == 0
        now = time.monotonic()
        assert not parts.due(now + logparts.PART_GAP_S + 1)  # backs off after a flush that found no whole line
        later = now + logparts.IDLE_AFTER_NOTHING_S
        assert not parts.due(later) and parts.due(later + logparts.NEW_OUTPUT_S)  # then as any new output
    finally:
        parts.close()


def test_the_flag_reaches_every_entrypoints_parser() -> None:
    from training import single, torchrun_ddp
    from training.ray_ddp import parse_args

    assert single.parse_args(["--log-every-steps", "0"]).log_every_steps == 0
    assert torchrun_ddp.parse_args(["--run-name", "r"]).log_every_steps == step_rows.DEFAULT_EVERY
    assert parse_args(["--log-every-steps", "25"]).log_every_steps == 25


def test_the_companion_writes_the_rows_of_a_scripts_log_into_its_run_folder(tmp_path: Path) -> None:
    """The real companion over local storage: a script printing step rows (with Ray's prefix, as forwarded from a
    worker); metrics.jsonl and system.jsonl are in the run's folder when it ends."""
    storage = tmp_path / "storage"
    storage.mkdir()
    script = ("import json, sys\nfor step in (10, 20):\n"
              "    sys.stdout.write('(RayTrainWorker pid=1) rtjob-event: step_row ' + json.dumps("
              "{'step': step, 'time': 1.5, 'loss': 1 / step}) + '\\n')\n")
    log = tmp_path / "job-driver.log"
    env = {"PATH": fake_smi(tmp_path / "bin", SMI_LINES, SMI_QUERY), "PYTHONPATH": f"{REPO / 'cli'}:{REPO}",
           "RTJOB_RUN_NAME": "r1", "RTJOB_JOB_NAME": "job", "RTJOB_RUN_URI": str(storage),
           "RTJOB_RUN_DIR": str(storage)}
    command = (f"{shlex.quote(sys.executable)} -m rtjob.runside.companion "
               f"{shlex.quote(f'{shlex.quote(sys.executable)} -c {shlex.quote(script)}')}")
    with open(log, "a") as out:
        subprocess.run(command, shell=True, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120, check=True)
    assert [(r["step"], r["loss"]) for r in read_rows(storage / contract.STEP_METRICS_FILE)] == [(10, 0.1), (20, 0.05)]
    system = read_rows(storage / contract.SYSTEM_METRICS_FILE)
    assert len(system) == 1 and system[0]["node"] == system_rows.node_name() and len(system[0]["gpus"]) == 2


def test_sampling_ends_its_thread_with_the_training(capsys: pytest.CaptureFixture[str]) -> None:
    """single.train samples its node for its own duration: a process that trains in a test (or twice) keeps no
    sampler printing into whatever runs next."""
    import threading

    def samplers() -> int:
        return sum(t.name == "rtjob-system-rows" for t in threading.enumerate())

    with system_rows.sampling(0.05):
        assert samplers() == 1
    assert samplers() == 0
    with system_rows.sampling(0.05):  # and again, as a second train() in the same process
        assert samplers() == 1
    assert samplers() == 0
