#!/usr/bin/env python3
"""A printed line → the run's stored log (issue 36; row 14 of `make bench`): what `rtjob ui` and `rtjob logs` read
while a run goes, beside `ray job submit`'s print → terminal for the same job on the same cluster.

    python benchmarks/livelog_bench.py [--s3]  (starts its own embedded cluster, stopped at the end; --s3: the run's
                                                storage in a moto S3 server on loopback, as row 14c)

- rtjob: `rtjob submit bench-live --no-wait` (60 lines 0.25 s apart, each carrying its `time.time()`); this process
  reads the run's log parts in its storage folder (`logs/<id>/part-*`, the local storage of the benchmark's project)
  every 10 ms and notes each line's arrival. The companion uploads a part ~0.5 s after new output (logparts.py's
  NEW_OUTPUT_S), besides its regular flush every 5 s.
- the companion's CPU while the run goes: its process's utime+stime from /proc between the 8th and the 56th line, as
  a share of one core (goal ≤ 1%); its start-up (imports, seeding) is outside that window.
- peer: `ray job submit` of the same entrypoint followed on a pseudo-terminal (loglat_bench.ray_submit_watched).
- with --s3: the same run with `--storage s3://…` (moto on loopback), the parts listed and read with boto3 every
  50 ms; the companion's CPU then includes botocore's signing of each part's PUT.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loglat_bench import _cpu_s, _note, ray_submit_watched  # noqa: E402

LINES = 60
GAP_S = 0.25
GOAL_S = 1.5
GOAL_CPU = 0.01
S3_BUCKET = "livelog"


def _companion_pid(run_id: str, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            # the Python process itself, not Ray's `sh -c` around it
            if b"-m\0rtjob.runside.companion" in cmdline and f"RTJOB_RUN_NAME={run_id}".encode() in environ:
                return int(pid)
        time.sleep(0.05)
    raise RuntimeError(f"no companion process of {run_id} within {timeout:.0f} s")


def _watch_parts(list_parts: Callable[[], list[str]], read: Callable[[str], bytes], seen: dict[int, float],
                 stop: threading.Event, every_s: float) -> None:
    """Each line's latency as it appears in the stored parts (read in order, each once)."""
    done: set[str] = set()
    carry = b""
    while not stop.is_set():
        for name in sorted(list_parts()):
            if name.rsplit("/", 1)[-1].startswith("part-") and name not in done:
                done.add(name)
                carry = _note(seen, read(name), carry)
        time.sleep(every_s)


def _local_reader(folder: Path) -> tuple[Callable[[], list[str]], Callable[[str], bytes]]:
    return (lambda: os.listdir(folder) if folder.is_dir() else []), (lambda name: (folder / name).read_bytes())


def _s3_reader(client: Any, bucket: str, prefix: str) -> tuple[Callable[[], list[str]], Callable[[str], bytes]]:
    def names() -> list[str]:
        return [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]

    return names, (lambda key: client.get_object(Bucket=bucket, Key=key)["Body"].read())


def rtjob_side(b: Any, c: Any, run_id: str, s3: Any = None) -> tuple[dict[int, float], float]:
    """(line → latency into storage, the companion's CPU share of a core between lines 8 and 56)."""
    extra = ["--storage", f"s3://{S3_BUCKET}/runs", "--forward-aws-credentials"] if s3 is not None else []
    env = {**c.env, **s3.env(), "AWS_EC2_METADATA_DISABLED": "true"} if s3 is not None else c.env
    proc = b.run_checked([b.RTJOB, "submit", "bench-live", "--submission-id", run_id, "--no-wait", "-o", "json",
                          *extra], env, timeout=120)
    storage = json.loads(proc.stdout)["storage_uri"]
    if s3 is not None:
        reader = _s3_reader(s3.client(), S3_BUCKET, f"{storage.split('/', 3)[3]}/logs/{run_id}/")
    else:
        reader = _local_reader(Path(storage) / "logs" / run_id)
    seen: dict[int, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_parts, args=(*reader, seen, stop, 0.05 if s3 is not None else 0.01),
                               daemon=True)
    watcher.start()
    try:
        pid = _companion_pid(run_id)
        deadline = time.monotonic() + 120
        while 8 not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        cpu0, t0 = _cpu_s(pid), time.monotonic()
        while 56 not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
        cpu1, t1 = _cpu_s(pid), time.monotonic()
        while len(seen) < LINES and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        watcher.join(timeout=10)
    c.finished_jobs.append(run_id)
    return seen, (cpu1 - cpu0) / (t1 - t0) if t1 > t0 else float("nan")


def livelog_rows(b: Any, c: Any, s3: Any = None) -> list[dict[str, str]]:
    """The rows (``b``: run.py's module, ``c``: its Context with the embedded cluster up; ``s3``: a moto server
    holding S3_BUCKET, for the S3 rows 14c and 14d instead)."""
    entry = f"python emitter.py {LINES} {GAP_S}"
    (Path(c.env["RTJOB_PROJECT"]) / "jobs" / "bench-live.yaml").write_text(
        f"name: bench-live\nstrategy: custom\nentrypoint: {entry}\n")
    rt_id = f"bench-live-{os.urandom(2).hex()}"
    ray_id = f"bench-live-ray-{os.urandom(2).hex()}"
    stored, cpu = rtjob_side(b, c, rt_id, s3)
    peer = ray_submit_watched(b, c, ray_id, entry)
    if not stored or not peer.terminal:
        raise RuntimeError(f"no latency seen: {len(stored)} lines in storage, {len(peer.terminal)} on ray's terminal")
    mine, theirs = statistics.median(stored.values()), statistics.median(peer.terminal.values())
    c.notes.append(f"14: {len(stored)} of {LINES} lines reached the run's stored log ({GAP_S} s apart), p95 "
                   f"{sorted(stored.values())[int(0.95 * (len(stored) - 1))]:.3f} s, max {max(stored.values()):.3f} s; "
                   f"{len(peer.terminal)} reached `ray job submit`'s terminal")
    where, rows = ("S3 (moto on loopback)", "cd") if s3 is not None else ("local storage", "ab")
    return [
        {"measurement": f"14{rows[0]}. a printed line → the run's stored log in {where} (what `rtjob ui` reads), "
                        f"median ({LINES} lines {GAP_S} s apart)", "rtjob": f"{mine:.3f} s",
         "peer": f"`ray job submit` print → terminal {theirs:.3f} s", "ratio": f"{mine / theirs:.2f}× (rtjob/ray)",
         "goal": f"≤ {GOAL_S} s", "met": "yes" if mine <= GOAL_S else "**NO**"},
        {"measurement": f"14{rows[1]}. the companion's CPU while that run prints (lines 8–56, {where}), share of "
                        "one core",
         "rtjob": f"{cpu * 100:.2f}%", "peer": "—", "ratio": "—", "goal": f"≤ {GOAL_CPU:.0%}",
         "met": "yes" if cpu <= GOAL_CPU else "**NO**"},
    ]


def main() -> int:
    import run as bench  # noqa: PLC0415 - run.py's cluster and project helpers
    from table import print_table  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="rtjob-livelog-", dir="/tmp"))
    ctx = bench.Context(work=work, env=bench.base_env(work))
    bench.make_project(work / "project")
    load = os.getloadavg()[0]
    with bench.embedded_cluster(ctx):
        rows = livelog_rows(bench, ctx)
        if "--s3" in sys.argv:
            sys.path.insert(0, str(HERE.parent / "tests"))
            from support.s3_server import bucket_server  # noqa: PLC0415

            with bucket_server(S3_BUCKET) as s3:
                rows += livelog_rows(bench, ctx, s3)
    ctx.notes.append(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end (2 cores, shared)")
    print_table(rows, ctx.notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
