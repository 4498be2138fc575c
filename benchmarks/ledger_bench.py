"""`rtjob runs -o json --limit 10000` over a ledger of 10,000 realistic run records (issue 12: "well under a
second"). There is no peer: Ray forgets finished jobs with their cluster; the goal is absolute.

    python benchmarks/ledger_bench.py          # prints the rows as a Markdown table
    from ledger_bench import run_ledger_bench  # benchmarks/run.py: rows for results.md

Measurements (one warm-up each, then medians of the repeats):
  1. the whole command as a user runs it (process start-up included), its JSON checked to hold every entry;
  2. in-process: open the ledger, ``Ledger.summaries(limit=10000)``, ``json.dumps`` of them.
The ledger is filled through the Ledger API in a private RTJOB_HOME that is removed afterwards.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rtjob.core.record import RunRecord, spec_hash
from rtjob.ledger import Ledger

ENTRIES = 10_000
REPEATS = 5
GOAL_S = 0.5  # "well under a second"
RUNS_ARGV = [sys.executable, "-m", "rtjob.main", "runs", "-o", "json", "--limit", str(ENTRIES)]


def realistic_record(n: int, start: dt.datetime) -> RunRecord:
    """A finished ddp-resnet run as rtjob records one: the rendered request, spec, shape, rate, cost, git,
    attempts and a metrics summary (about 3 KB of JSON, like a real record)."""
    run_id = f"rtjob-ddp-resnet-{start:%Y%m%d-%H%M}-{n:05x}"
    begun = start.isoformat(timespec="seconds")
    ended = (start + dt.timedelta(minutes=42)).isoformat(timespec="seconds")
    status = ("SUCCEEDED", "SUCCEEDED", "FAILED", "STOPPED")[n % 4]
    env = {"RTJOB_RUN_ID": run_id, "RTJOB_JOB": "ddp-resnet", "RTJOB_STORAGE": f"s3://team-runs/ddp-resnet/{run_id}",
           "RTJOB_NUM_WORKERS": "4", "RTJOB_GPUS_PER_WORKER": "1", "WANDB_API_KEY": "***", "HF_TOKEN": "***",
           "NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "8"}
    spec: dict[str, Any] = {
        "job": {"name": "ddp-resnet", "strategy": "ddp", "entrypoint": "python -m training.train",
                "args": ["--epochs", "20", "--lr", "0.1", "--batch-size", "256"], "nodes": 2,
                "compute_config": "gpu-g5", "env": {"NCCL_DEBUG": "WARN", "WANDB_API_KEY": "${secret:wandb}"},
                "max_retries": 1, "storage": "s3://team-runs"},
        "overrides": ["--nodes", "2", "--set", "args.lr=0.1"],
    }
    return RunRecord(
        id=run_id, job="ddp-resnet", backend=("ray", "anyscale", "local")[n % 3], status=status,
        address="https://ray-head.internal.example.com:8265", message=f"Job {status.lower()} after 42m",
        exit_code=0 if status == "SUCCEEDED" else 1, submitted_at=begun, start_time=begun, end_time=ended,
        storage_uri=f"s3://team-runs/ddp-resnet/{run_id}", storage_endpoint=None, job_file="jobs/ddp-resnet.yaml",
        project_root="/home/dev/projects/vision", working_dir="/home/dev/projects/vision", spec_hash=spec_hash(spec),
        spec=spec,
        request={"entrypoint": "python -m training.train --epochs 20 --lr 0.1 --batch-size 256",
                 "submission_id": run_id, "runtime_env": {"working_dir": "gcs://_ray_pkg_5f1e2d3c4b5a6978.zip",
                                                          "env_vars": env, "pip": ["torchvision==0.20.1"]},
                 "metadata": {"rtjob.job": "ddp-resnet", "rtjob.storage": f"s3://team-runs/ddp-resnet/{run_id}",
                              "rtjob.rate": '{"low": 7.88, "high": 7.88}', "rtjob.attempt": "1"},
                 "entrypoint_num_cpus": 1},
        shape={"nodes": 2, "workers": 4, "resources_per_worker": {"GPU": 1, "CPU": 8}, "compute_config": "gpu-g5"},
        rate={"usd_per_hour": 7.88, "low": 7.88, "high": 7.88, "fixed": True, "region": "us-east-1",
              "as_of": "2025-07", "text": "est. $7.88/h = head m5.2xlarge $0.384 + 2 × g5.12xlarge"},
        cost={"estimated_usd": 5.52, "estimated_usd_min": 5.52, "estimated_usd_max": 5.52, "hours": 0.7,
              "text": "est. $5.52 (0h42m × $7.88/h)"},
        git={"commit": f"{n:040x}", "dirty": n % 5 == 0, "branch": "main"}, user="dev", host="ci-runner-07",
        attempts=[{"id": run_id, "attempt": 1, "status": status, "exit_code": 0, "retry_reason": None}],
        metrics={"last": {"epoch": 20, "train_loss": 0.134, "val_loss": 0.212, "val_acc": 0.931},
                 "best": {"epoch": 17, "val_loss": 0.198}, "rows": 20},
        logs=["logs/driver.log"], archived=True,
    )


def fill(path: Path, count: int = ENTRIES) -> int:
    """``count`` runs, one a minute back from now, saved through the Ledger API; returns the records' JSON bytes."""
    start = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=count)
    records = [realistic_record(n, start + dt.timedelta(minutes=n)) for n in range(count)]
    with Ledger(path) as ledger:
        ledger.save_many(records)
    return sum(len(r.dumps()) for r in records)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}–{max(values):.3f})"


def _in_process(path: Path, count: int) -> float:
    begin = time.perf_counter()
    with Ledger(path) as ledger:
        text = json.dumps(ledger.summaries(limit=count))
    elapsed = time.perf_counter() - begin
    if text.count('"id":') != count:
        raise RuntimeError(f"summaries gave {text.count(chr(34) + 'id' + chr(34) + ':')} entries, not {count}")
    return elapsed


def _command(argv: list[str], env: dict[str, str], count: int) -> float:
    begin = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - begin
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv[1:])}` exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
    data = json.loads(proc.stdout)
    runs = data if isinstance(data, list) else data.get("runs")
    if not isinstance(runs, list) or len(runs) != count:
        raise RuntimeError(f"`{' '.join(argv[1:])}` printed {len(runs) if isinstance(runs, list) else 'no'} runs, "
                           f"not {count}")
    return elapsed


def run_ledger_bench(runs_argv: list[str] | None = None, *, count: int = ENTRIES, repeats: int = REPEATS,
                     notes: list[str] | None = None) -> list[dict[str, str]]:
    """Rows (keys measurement, rtjob, peer, ratio, goal, met). ``runs_argv`` is the `rtjob runs` command line
    to time (default: this interpreter's ``-m rtjob.main runs -o json --limit 10000``); if it cannot run, its
    row says why (FAILED) and the in-process row is still measured."""
    argv = runs_argv or RUNS_ARGV
    notes = notes if notes is not None else []
    work = Path(tempfile.mkdtemp(prefix="rtjob-ledgerbench-", dir="/tmp"))
    try:
        path = work / "home" / "ledger.sqlite3"
        size = fill(path, count)
        notes.append(f"ledger: {count:,} run records of {size / count / 1000:.1f} kB JSON each "
                     f"({path.stat().st_size / 1e6:.0f} MB file), filled through the Ledger API")
        env = {**os.environ, "RTJOB_HOME": str(work / "home")}
        inside = [_in_process(path, count) for _ in range(repeats + 1)][1:]
        rows = []
        try:
            whole = [_command(argv, env, count) for _ in range(repeats + 1)][1:]
            met = statistics.median(whole) <= GOAL_S
            rows.append({"measurement": f"`rtjob runs -o json --limit {count}` over {count:,} ledger entries "
                                        f"(whole command, median of {repeats})",
                         "rtjob": _spread(whole), "peer": "— (none keeps this history)", "ratio": "—",
                         "goal": f"well under 1 s (≤ {GOAL_S} s)", "met": "yes" if met else "no"})
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            reason = f"failed: {exc}".replace("|", "/").replace("\n", " ")
            rows.append({"measurement": f"`rtjob runs -o json --limit {count}` over {count:,} ledger entries",
                         "rtjob": reason, "peer": "—", "ratio": "—", "goal": "—", "met": "**FAILED**"})
        rows.append({"measurement": f"… of which in-process: open the ledger, `summaries(limit={count})`, "
                                    f"`json.dumps` (median of {repeats})",
                     "rtjob": _spread(inside), "peer": "—", "ratio": "—", "goal": "—", "met": "—"})
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    lines: list[str] = []
    table = run_ledger_bench(notes=lines)
    from table import print_table  # run as a script: this folder is on sys.path

    print_table(table, lines)
