"""Submit → first step on a running embedded cluster (the start-up issue, part 4): `rtjob submit ddp-resnet`
(2 workers, Ray Train DDP, the job's local profile: synthetic data) against one process of the same model and data
(`python -m training.single`), side by side in one run, interleaved, after one warm-up of each.

    python benchmarks/startup_bench.py          # prints the rows as a Markdown table
    python benchmarks/startup_bench.py RAY_enable_worker_prestart=1   # the same with a lever set on the raylets
    from startup_bench import run_startup_bench  # benchmarks/run.py: rows for results.md

rtjob's side is timed from the CLI's spawn to the run's recorded `first_step` (the run's timeline, this machine's
clock, UTC both); the peer from its process's spawn to its `rtjob-event: first_step` line. A second row gives each
phase's share of rtjob's side (median offsets from the spawn). Goal (the issue's): ≤ 2×.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from coldstart_bench import ROOT, Side, rtjob_command

REPEATS = 2
GOAL = 2.0
ARGS = ["--epochs", "1", "--global-batch-size", "128", "--lr", "0.001", "--dataset", "synthetic"]
FIRST_STEP = b"rtjob-event: first_step"


def _rtjob_run(rtjob: list[str], env: dict[str, str]) -> dict[str, float]:
    """Each timeline stage's offset from the submit's spawn, in seconds."""
    run_id = f"startup-{uuid.uuid4().hex[:8]}"
    began = dt.datetime.now(dt.timezone.utc)
    subprocess.run([*rtjob, "submit", "ddp-resnet", "--nodes", "2", "--set", "args.epochs=1", "--no-wait",
                    "--submission-id", run_id], env=env, cwd=ROOT, check=True, capture_output=True, timeout=300)
    subprocess.run([*rtjob, "wait", run_id], env=env, cwd=ROOT, check=True, capture_output=True, timeout=900)
    shown = subprocess.run([*rtjob, "show", run_id, "-o", "json"], env=env, cwd=ROOT, check=True,
                           capture_output=True, text=True, timeout=120)
    timeline = json.loads(shown.stdout)["timeline"]
    return {stage: (dt.datetime.fromisoformat(at.replace("Z", "+00:00")) - began).total_seconds()
            for stage, at in timeline.items()}


def _single(env: dict[str, str], work: Path) -> float:
    """Spawn → the single process's first step, in seconds (the process is ended once it said so)."""
    env = {**env, "RTJOB_STORAGE_PATH": str(work / "single"), "RTJOB_RUN_NAME": f"s-{uuid.uuid4().hex[:6]}"}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "training.single", *ARGS], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(FIRST_STEP):
                return time.monotonic() - start
        raise RuntimeError(f"training.single exited {proc.wait()} before its first step")
    finally:
        proc.kill()
        proc.wait()


def run_startup_bench(rtjob: list[str] | None = None, *, notes: list[str] | None = None,
                      ray_env: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Rows (keys measurement, rtjob, peer, ratio, goal, met); ``ray_env``: variables for the embedded cluster's
    `ray start` (a start-up lever on or off: docs/benchmarks.md has the figures of each)."""
    rtjob = rtjob or rtjob_command()
    notes = notes if notes is not None else []
    work = Path(tempfile.mkdtemp(prefix="rtjob-startbench-", dir="/tmp"))
    side = Side(work, "start", rtjob)
    side.env.update(ray_env or {})
    runs: list[dict[str, float]] = []
    singles: list[float] = []
    try:
        subprocess.run([*rtjob, "local", "up", "--nodes", "2"], env=side.env, cwd=ROOT, check=True,
                       capture_output=True, timeout=300)
        _rtjob_run(rtjob, side.env), _single(side.env, work)  # warm-ups: the package upload, the page cache
        for _ in range(REPEATS):
            runs.append(_rtjob_run(rtjob, side.env))
            singles.append(_single(side.env, work))
    finally:
        side.stop(notes)
    rt = statistics.median(run["first_step"] for run in runs)
    peer = statistics.median(singles)
    stages = sorted({stage for run in runs for stage in run if stage != "ended"},
                    key=lambda stage: statistics.median(run.get(stage, 0.0) for run in runs))
    shares = ", ".join(f"{stage} +{statistics.median(run[stage] for run in runs if stage in run):.1f} s"
                       for stage in stages)
    return [
        {"measurement": f"submit → first step, `ddp-resnet` (2 workers) on a running cluster vs one process "
                        f"(median of {REPEATS}, {os.cpu_count()} cores)",
         "rtjob": f"{rt:.1f} s", "peer": f"{peer:.1f} s (`python -m training.single`)",
         "ratio": f"{rt / peer:.2f}×", "goal": f"≤{GOAL:.1f}×", "met": "yes" if rt / peer <= GOAL else "no"},
        {"measurement": "… each phase's offset from the submit's spawn (median)", "rtjob": shares, "peer": "—",
         "ratio": "—", "goal": "—", "met": "—"},
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    extra = dict(arg.split("=", 1) for arg in sys.argv[1:])
    for row in run_startup_bench(ray_env=extra):
        print("| " + " | ".join(row.values()) + " |")
