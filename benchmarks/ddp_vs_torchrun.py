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
from collections.abc import Callable
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
    # CPU seconds per kind of process (``process_kind``) between the first and the last epoch line, and
    # that window's length: where a side's CPU goes while it trains
    by_kind: dict[str, float]
    window_s: float


def process_kind(cmdline: list[str]) -> str:
    """A short name for one process of a training run: Ray's daemons by executable or script, its actors
    and workers by their process title (``ray::TrainController.run`` → ``ray::TrainController``)."""
    if not cmdline:
        return "?"
    first = cmdline[0]
    if first.startswith("ray::"):
        return first.split()[0].split(".")[0]
    name = os.path.basename(first)
    if name in ("gcs_server", "raylet"):
        return name
    text = " ".join(cmdline)
    for script in ("dashboard/dashboard.py", "dashboard/agent.py", "runtime_env/agent/main.py",
                   "_private/log_monitor.py", "autoscaler/_private/monitor.py", "ray.util.client.server"):
        if script in text:
            return script.rsplit("/", 1)[-1].removesuffix(".py") if "/" in script else script
    if name.startswith("ray-dashboard-") or "ray-dashboard-" in text:
        return "dashboard module"
    if "torch.distributed.run" in text:
        return "torchrun launcher"
    if "training.torchrun_ddp" in text:
        return "torchrun worker"
    return "Ray driver" if "training.ray_ddp" in text else name


def _cpu_by_pid(root: int) -> dict[int, tuple[tuple[str, ...], float]]:
    """CPU seconds so far of every process under ``root`` (its kind beside it): Ray's local instance (and
    with it its workers) and torchrun's workers are ``root``'s descendants, so other clusters on the machine
    are never counted."""
    import psutil

    found: dict[int, tuple[tuple[str, ...], float]] = {}
    with contextlib.suppress(psutil.Error):
        top = psutil.Process(root)
        for proc in [top, *top.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                found[proc.pid] = (tuple(proc.cmdline()), times.user + times.system)
    return found


def _window(first: dict[int, tuple[tuple[str, ...], float]], last: dict[int, tuple[tuple[str, ...], float]]) -> dict[int, tuple[tuple[str, ...], float]]:
    """Per process: CPU seconds used between two snapshots (a process born in between counts from 0)."""
    return {pid: (cmd, cpu - first[pid][1] if pid in first else 0.0) for pid, (cmd, cpu) in last.items()}


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
    marks: list[tuple[float, dict[int, tuple[tuple[str, ...], float]]]] = []  # (wall, every process's CPU) at each epoch line
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if EPOCH.search(line):
            marks.append((time.perf_counter(), _cpu_by_pid(proc.pid)))
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
    used = _window(c0, c1)
    training = sum(cpu for argv, cpu in used.values() if marker in " ".join(argv))
    cores = training / (t1 - t0) if t1 > t0 else float("nan")
    by_kind: dict[str, float] = {}
    for argv, cpu in used.values():
        kind = process_kind(list(argv))
        by_kind[kind] = by_kind.get(kind, 0.0) + cpu
    return Run([s for _, s in ordered], [loss for loss, _ in ordered], wall, cores, by_kind, t1 - t0)


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
    ray_settings: dict[str, str] | None = None,
    compare_defaults: bool = True,
    notes: list[str] | None = None,
) -> list[BenchRow]:
    """Measure both sides ``repeats`` times (interleaved) and return the table rows.

    Ray runs with ``ray_settings`` in its environment (default: the settings rtjob gives its embedded
    cluster, ``rtjob.backends.ray.tuning.RAY_SETTINGS``), and with ``compare_defaults`` once more with Ray's
    defaults in the same interleaving, for the before/after rows; each side's CPU seconds per kind of
    process over the training window go to ``notes``.

    Raises RuntimeError (with the reason) if a run fails. About 3 x (20-40 s) on a 2-core machine with the
    defaults: Ray's side adds 15-25 s of worker-group start-up, which the in-loop figure excludes and the
    wall-time row shows.
    """
    if ray_settings is None:
        from rtjob.backends.ray.tuning import RAY_SETTINGS

        ray_settings = RAY_SETTINGS
    if epochs < 2:
        raise ValueError("epochs must be >= 2: the first epoch is the warm-up and is not compared")
    sandbox = Path(tempfile.mkdtemp(prefix="rtbench-", dir="/tmp"))  # short: Ray's socket paths are capped
    (sandbox / "home").mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RTJOB_"))}
    base.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    common = ["--dataset", "synthetic", "--train-size", str(train_size), "--val-size", str(val_size),
              "--global-batch-size", str(global_batch_size), "--epochs", str(epochs), "--seed", "0"]
    default_env = {**base, "HOME": str(sandbox / "home"), "RAY_TMPDIR": str(sandbox)}
    for name in ray_settings:
        default_env.pop(name, None)
    ray_env = {**default_env, **ray_settings}
    torchrun_runs: list[Run] = []
    ray_runs: list[Run] = []
    default_runs: list[Run] = []
    try:
        for i in range(repeats):
            torchrun_runs.append(_run(
                ["nice", "-n", str(niceness), python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers),
                 "-m", "training.torchrun_ddp", *common, "--storage-path", str(sandbox / "results"),
                 "--run-name", f"torchrun-{i}"],
                base, timeout_s, "torchrun DDP", "training.torchrun_ddp"))
            ray_cmd = [python, "-m", "training.ray_ddp", *common, "--num-workers", str(workers), "--cpus-per-worker",
                       "1", "--storage-path", str(sandbox / "results")]
            ray_runs.append(_run([*ray_cmd, "--run-name", f"ray-{i}"], ray_env, timeout_s, "Ray Train DDP",
                                 "ray::RayTrainWorker"))
            if compare_defaults:
                default_runs.append(_run([*ray_cmd, "--run-name", f"ray-default-{i}"], default_env, timeout_s,
                                         "Ray Train DDP (Ray's defaults)", "ray::RayTrainWorker"))
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
    if notes is not None:
        sides = [("torchrun", torchrun_runs), ("Ray, rtjob's settings", ray_runs), ("Ray, Ray's defaults", default_runs)]
        notes.append(cpu_table([(name, runs[-1]) for name, runs in sides if runs]))
    rows = [
        BenchRow(
            f"Ray Train DDP (rtjob's embedded-cluster settings) vs torchrun DDP: in-loop samples/s ({shape}; "
            f"median of {n} epochs after warm-up)",
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
    if default_runs:
        rows += before_after_rows(ray_runs, default_runs, steady)
    return rows


def overhead_cores(run: Run) -> float:
    """CPU cores Ray's own processes (all but the training workers and the driver) took while it trained."""
    own = sum(cpu for kind, cpu in run.by_kind.items() if kind not in ("ray::RayTrainWorker", "Ray driver"))
    return own / run.window_s if run.window_s > 0 else float("nan")


def before_after_rows(tuned: list[Run], default: list[Run], steady: Callable[[list[Run]], list[float]]) -> list[BenchRow]:
    """The same Ray Train run with rtjob's settings against Ray's defaults, from the same interleaved run."""
    tuned_sps, default_sps = statistics.median(steady(tuned)), statistics.median(steady(default))
    tuned_own = statistics.median(overhead_cores(r) for r in tuned)
    default_own = statistics.median(overhead_cores(r) for r in default)
    return [
        BenchRow(
            "… the same Ray Train run with rtjob's settings vs Ray's defaults (tuning.RAY_SETTINGS), same run: "
            "in-loop samples/s",
            f"{tuned_sps:.1f} samples/s", f"{default_sps:.1f} samples/s (Ray's defaults)",
            f"{tuned_sps / default_sps:.3f}× (settings/defaults)", "—", "—",
        ),
        BenchRow(
            "… Ray's own processes' CPU while it trains (GCS, raylet, dashboard, agents, Train's actors; "
            "per-process table in the notes)",
            f"{tuned_own:.3f} cores", f"{default_own:.3f} cores (Ray's defaults)",
            f"{tuned_own / default_own:.2f}× (settings/defaults)" if default_own else "—", "—", "—",
        ),
    ]


def cpu_table(sides: list[tuple[str, Run]]) -> str:
    """Markdown: CPU seconds per kind of process over each side's training window (first to last epoch line)."""
    kinds = sorted({k for _, run in sides for k in run.by_kind},
                   key=lambda k: -max(run.by_kind.get(k, 0.0) for _, run in sides))
    head = "| process | " + " | ".join(f"{name} (CPU s over {run.window_s:.1f} s)" for name, run in sides) + " |"
    rows = [f"| {kind} | " + " | ".join(f"{run.by_kind[kind]:.2f}" if kind in run.by_kind else "—" for _, run in sides)
            + " |" for kind in kinds]
    return "CPU seconds per process kind while training:\n\n" + "\n".join(
        [head, "|---|" + "---|" * len(sides), *rows])


if __name__ == "__main__":
    found: list[str] = []
    for row in bench_ddp_vs_torchrun(notes=found):
        print(" | ".join(row))
    print("\n".join(found))
