"""The run-side companion (issue 25): what carrying a run costs, and where a submit's start-up time goes.

    python benchmarks/companion_bench.py       # prints the rows as a Markdown table
    from companion_bench import run_companion_bench  # benchmarks/run.py: rows for results.md

On a private embedded cluster (its own RTJOB_HOME; stopped by `rtjob local down` at the end):
  a. the companion's CPU over a training run: `rtjob submit ddp-resnet --nodes 2` (its local profile: synthetic
     data), the companion's own CPU time (its record's companion_cpu_s, from getrusage) over the run's time from
     the driver's start to its end, as a share of one core (goal ≤ 1%);
  b. the start-up timeline of a cold submit (no cluster: rtjob starts it) and of a warm one (the cluster is up),
     read from the runs' records: process start → submitted (the CLI, the plan, a cold cluster's start),
     → accepted (the upload and the Jobs API's answer), → driver started (Ray's runtime env, the job's supervisor
     actor, the companion's start), → first log line, → first training step (Ray Train's worker group), → end.
The comparison with Ray's own CLI by hand, from process start to the first line on a terminal, is row 10
(coldstart_bench.py); this row says where rtjob's side of it goes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RTJOB = [sys.executable, "-m", "rtjob.main"]
GOAL_CPU = 0.01
STAGES = ("submitted", "accepted", "driver_started", "first_log_line", "first_step", "ended")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RTJOB_", "AWS_"))}
    env.update({"RTJOB_HOME": str(home), "XDG_CONFIG_HOME": str(home / "xdg"), "PYTHONUNBUFFERED": "1"})
    return env


def _submit(env: dict[str, str], run_id: str, *args: str) -> tuple[float, dict]:
    """Run ``rtjob submit``; (the wall-clock time it was spawned, as a POSIX time; its record)."""
    spawned = time.time()
    proc = subprocess.run([*RTJOB, "submit", *args, "--submission-id", run_id, "-o", "json"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"rtjob submit {args[0]} exited {proc.returncode}: {proc.stderr[-1500:]}")
    storage = json.loads(proc.stdout)["storage_uri"]
    deadline = time.monotonic() + 60
    while True:  # the companion writes the end; the client may have written the record a moment before
        record = json.loads((Path(storage) / "rtjob-run.json").read_text())
        if record.get("completed_by") == "companion" or time.monotonic() > deadline:
            return spawned, record
        time.sleep(0.5)


def _stages(spawned: float, record: dict) -> dict[str, float]:
    """Seconds from the CLI's spawn to each stage of the record's timeline."""
    out = {}
    for stage in STAGES:
        when = record.get("timeline", {}).get(stage)
        if when:
            out[stage] = dt.datetime.fromisoformat(when).timestamp() - spawned
    return out


def _fmt(stages: dict[str, float]) -> str:
    parts, before = [], 0.0
    for stage in STAGES:
        if stage in stages:
            parts.append(f"{stage.replace('_', ' ')} +{stages[stage] - before:.1f}")
            before = stages[stage]
    return ", ".join(parts)


def run_companion_bench(notes: list[str] | None = None) -> list[dict[str, str]]:
    notes = notes if notes is not None else []
    home = Path(tempfile.mkdtemp(prefix="rtjob-companion-bench-"))
    env = _env(home)
    rows: list[dict[str, str]] = []
    try:
        cold_spawn, cold = _submit(env, "bench-cold", "tests/support/jobs/count.yaml", "--nodes", "2")
        warm_spawn, warm = _submit(env, "bench-warm", "tests/support/jobs/count.yaml", "--nodes", "2")
        train_spawn, train = _submit(env, "bench-train", "ddp-resnet", "--nodes", "2")
        timeline = train["timeline"]
        ran = (dt.datetime.fromisoformat(timeline["ended"]) - dt.datetime.fromisoformat(timeline["driver_started"]))
        share = train["companion_cpu_s"] / ran.total_seconds()
        rows.append({
            "measurement": "12a. the companion's CPU over a training run (ddp-resnet --nodes 2, synthetic)",
            "rtjob": f"{share * 100:.2f}% of one core ({train['companion_cpu_s']:.2f} s CPU over "
                     f"{ran.total_seconds():.0f} s)",
            "peer": "- (the entrypoint alone)", "ratio": f"{share * 100:.2f}%", "goal": "≤ 1%",
            "met": "yes" if share <= GOAL_CPU else "no",
        })
        for label, spawned, record in (("cold", cold_spawn, cold), ("warm", warm_spawn, warm),
                                       ("training, warm", train_spawn, train)):
            rows.append({
                "measurement": f"12b. start-up timeline, {label} embedded submit (s after the CLI's spawn)",
                "rtjob": _fmt(_stages(spawned, record)), "peer": "row 10 (by hand, whole)", "ratio": "-",
                "goal": "-", "met": "-",
            })
    finally:
        subprocess.run([*RTJOB, "local", "down"], env=env, cwd=ROOT, capture_output=True, timeout=300)
        shutil.rmtree(home, ignore_errors=True)
    return rows


def main() -> int:
    rows = run_companion_bench()
    print("| measurement | rtjob | peer | ratio | goal | met |\n|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['measurement']} | {row['rtjob']} | {row['peer']} | {row['ratio']} | {row['goal']} | "
              f"{row['met']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
