"""Ray Train DDP vs plain ``torchrun`` DDP: in-loop training throughput on the same model, data and batch.

    from benchmarks.ddp_vs_torchrun import bench_ddp_vs_torchrun
    rows = bench_ddp_vs_torchrun()      # list of BenchRow(measurement, rtjob, peer, ratio, goal, met)

rtjob's side is ``python -m training.ray_ddp`` (Ray Train V2, the ddp-resnet job's entrypoint) in a private
local Ray instance; the peer is ``torchrun --standalone --nproc-per-node N -m training.torchrun_ddp`` (the
torchrun-resnet job's training module). Both train ResNet18 (1-channel stem) on the same synthetic digits
with the same seed, global batch, N CPU processes and 1 OMP/intra-op thread each, and report
``samples/s`` from ``training.loop`` (global samples / slowest rank's epoch time, data loading included,
start-up excluded). The figure compared is the median over the epochs after the first (warm-up). The runs
are interleaved (torchrun, Ray, torchrun, ...) so that a machine getting busier moves both sides.

Scheduling priority is equal too: Ray starts every worker process at niceness 15 (its ``worker_niceness``
default; the control plane keeps 0), so the peer's processes run at the same niceness (``nice -n 15``).
Otherwise, on a machine shared with other work (as this one is), the comparison would measure the
kernel's priorities rather than Ray Train: with other load at niceness 0, Ray's niced workers got 0.65×
of an un-niced torchrun's throughput in one run here, for the same computation.

Both sides compute the same thing: same seed, sampler and batches, so their epoch losses agree; a row
checks that, so a throughput difference cannot come from different work. The Ray run uses its own
HOME and RAY_TMPDIR (it never touches ~/.ray, /tmp/ray or another cluster) and whatever it leaves
behind is ended by pid; nothing here runs ``ray stop``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
EPOCH = re.compile(r"epoch (\d+)/\d+ train_loss=([\d.]+) .*? samples/s=([\d.]+)")


class BenchRow(NamedTuple):
    """One row of benchmarks/results.md (``Row`` in benchmarks/run.py, which every benchmark's rows become)."""

    measurement: str
    rtjob: str
    peer: str
    ratio: str
    goal: str
    met: str


class Run(NamedTuple):
    samples_per_s: list[float]  # per epoch
    losses: list[float]  # train loss per epoch
    wall_s: float
    cores: float  # CPU cores the training processes got, between the first and the last epoch line


def _training_cpu_s(root: int, marker: str) -> float:
    """CPU seconds used so far by the training processes (``marker`` in their command line/title) under
    ``root``: Ray's local instance (and with it its workers) and torchrun's workers are ``root``'s
    descendants, so other clusters on the machine are never counted."""
    import psutil

    total = 0.0
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process(root).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if marker in " ".join(proc.cmdline()):
                    times = proc.cpu_times()
                    total += times.user + times.system
    return total


def _pids_mentioning(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
    return pids


def _run(cmd: list[str], env: dict[str, str], timeout: float, what: str, marker: str) -> Run:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines: list[str] = []
    marks: list[tuple[float, float]] = []  # (wall, training CPU seconds) at each epoch line
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if EPOCH.search(line):
            marks.append((time.perf_counter(), _training_cpu_s(proc.pid, marker)))
    proc.wait()
    timer.cancel()
    wall = time.perf_counter() - start
    output = "".join(lines)
    if proc.returncode in (-9, 137) and wall >= timeout:
        raise RuntimeError(f"{what} timed out after {timeout:.0f}s")
    if proc.returncode != 0:
        last = [line for line in output.strip().splitlines() if line.strip()][-2:]
        raise RuntimeError(f"{what} exited {proc.returncode}: {' | '.join(last)[:240]}")
    epochs: dict[int, tuple[float, float]] = {}
    for match in EPOCH.finditer(output):
        epochs[int(match[1])] = (float(match[2]), float(match[3]))
    if not epochs:
        raise RuntimeError(f"{what} printed no epoch lines")
    ordered = [epochs[e] for e in sorted(epochs)]
    (t0, c0), (t1, c1) = marks[0], marks[-1]
    cores = (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")
    return Run([s for _, s in ordered], [loss for loss, _ in ordered], wall, cores)


def bench_ddp_vs_torchrun(
    *,
    python: str = sys.executable,
    workers: int = 2,
    epochs: int = 3,
    train_size: int = 1024,
    val_size: int = 128,
    global_batch_size: int = 64,
    repeats: int = 1,
    timeout_s: float = 600,
    niceness: int = 15,
) -> list[BenchRow]:
    """Measure both sides ``repeats`` times (interleaved) and return the table rows.

    Raises RuntimeError (with the reason) if a run fails. About 2 x (20-40 s) on a 2-core machine with the
    defaults: Ray's side adds 15-25 s of worker-group start-up, which the in-loop figure excludes and the
    wall-time row shows.
    """
    if epochs < 2:
        raise ValueError("epochs must be >= 2: the first epoch is the warm-up and is not compared")
    sandbox = Path(tempfile.mkdtemp(prefix="rtbench-", dir="/tmp"))  # short: Ray's socket paths are capped
    (sandbox / "home").mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RTJOB_"))}
    base.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    common = ["--dataset", "synthetic", "--train-size", str(train_size), "--val-size", str(val_size),
              "--global-batch-size", str(global_batch_size), "--epochs", str(epochs), "--seed", "0"]
    ray_env = {**base, "HOME": str(sandbox / "home"), "RAY_TMPDIR": str(sandbox)}
    torchrun_runs: list[Run] = []
    ray_runs: list[Run] = []
    try:
        for i in range(repeats):
            torchrun_runs.append(_run(
                ["nice", "-n", str(niceness), python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers),
                 "-m", "training.torchrun_ddp", *common, "--storage-path", str(sandbox / "results"),
                 "--run-name", f"torchrun-{i}"],
                base, timeout_s, "torchrun DDP", "training.torchrun_ddp"))
            ray_runs.append(_run(
                [python, "-m", "training.ray_ddp", *common, "--num-workers", str(workers), "--cpus-per-worker", "1",
                 "--storage-path", str(sandbox / "results"), "--run-name", f"ray-{i}"],
                ray_env, timeout_s, "Ray Train DDP", "ray::RayTrainWorker"))
    finally:
        deadline = time.time() + 15  # the Ray driver shuts its instance down; end only what is left of it
        while (pids := _pids_mentioning(str(sandbox))) and time.time() < deadline:
            time.sleep(0.5)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(sandbox, ignore_errors=True)

    def steady(runs: list[Run]) -> list[float]:
        return [s for run in runs for s in run.samples_per_s[1:]]  # epochs after the warm-up

    ray_sps, tr_sps = statistics.median(steady(ray_runs)), statistics.median(steady(torchrun_runs))
    ratio = ray_sps / tr_sps
    ray_wall = statistics.median(r.wall_s for r in ray_runs)
    tr_wall = statistics.median(r.wall_s for r in torchrun_runs)
    ray_loss, tr_loss = ray_runs[-1].losses[-1], torchrun_runs[-1].losses[-1]
    ray_cores = statistics.median(r.cores for r in ray_runs)
    tr_cores = statistics.median(r.cores for r in torchrun_runs)
    ray_eff, tr_eff = ray_sps / ray_cores, tr_sps / tr_cores
    n = len(steady(ray_runs))
    shape = (f"ResNet18, {workers} CPU workers x 1 thread at niceness {niceness}, global batch "
             f"{global_batch_size}, {train_size} synthetic samples")
    return [
        BenchRow(
            f"Ray Train DDP vs torchrun DDP: in-loop samples/s ({shape}; median of {n} epochs after warm-up)",
            f"{ray_sps:.1f} samples/s ({min(steady(ray_runs)):.1f}–{max(steady(ray_runs)):.1f})",
            f"{tr_sps:.1f} samples/s ({min(steady(torchrun_runs)):.1f}–{max(steady(torchrun_runs)):.1f})",
            f"{ratio:.3f}× (ray/torchrun)", "≥0.9×", "yes" if ratio >= 0.9 else "no",
        ),
        BenchRow(
            "… per CPU core the training processes actually got (in-loop samples/s ÷ their CPU use over the "
            "steady epochs; what other load on the machine cannot skew)",
            f"{ray_eff:.1f} samples/s per core ({ray_cores:.2f} cores)",
            f"{tr_eff:.1f} samples/s per core ({tr_cores:.2f} cores)",
            f"{ray_eff / tr_eff:.3f}×", "≥0.9×", "yes" if ray_eff / tr_eff >= 0.9 else "no",
        ),
        BenchRow(
            "… wall time of the whole run (process start to exit; Ray starts a local instance and a worker group)",
            f"{ray_wall:.1f} s", f"{tr_wall:.1f} s", f"+{ray_wall - tr_wall:.1f} s (ray − torchrun)", "—", "—",
        ),
        BenchRow(
            f"… same work: final train loss after {epochs} epochs (same seed, sampler, batches)",
            f"{ray_loss:.4f}", f"{tr_loss:.4f}", f"Δ {abs(ray_loss - tr_loss):.4f}", "Δ ≤ 0.01",
            "yes" if abs(ray_loss - tr_loss) <= 0.01 else "no",
        ),
    ]


if __name__ == "__main__":
    for row in bench_ddp_vs_torchrun():
        print(" | ".join(row))
