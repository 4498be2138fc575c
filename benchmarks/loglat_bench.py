#!/usr/bin/env python3
"""Where a log line's time goes, print → terminal (rows 4d–4h of `make bench`; 4a–4c are the headline).

    python benchmarks/loglat_bench.py      (starts its own embedded cluster, stopped at the end; also prints
                                            the CPU of steady following, which `make bench` leaves out)

One run of the log job (40 lines 0.1 s apart, each carrying its `time.time()`) followed by `rtjob submit`, and one
by `ray job submit`, each on a pseudo-terminal; beside each, this process watches the same line at each step:
- the driver's log file (`job-driver-<id>.log` in the session's logs dir, read every 5 ms): print → file;
- the State API stream (`/api/v0/logs/stream`, interval 0.1 s, what rtjob follows): file → stream;
- the Jobs API websocket (`/api/jobs/<id>/logs/tail`, what `ray job submit` follows): file → websocket;
- the CLI's terminal: the whole way; its first line: how soon a follower starts streaming after the driver does.
And the CPU seconds each CLI used to follow its run (its own process and children), from submit to exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptyread import read_pty

LINE_RE = re.compile(rb"BENCHLINE (\d+) (\d+\.\d+)")
Seen = dict[int, float]  # line index → latency (arrival − print) of its first arrival


@dataclass
class Watch:
    file: Seen = field(default_factory=dict)
    stream: Seen = field(default_factory=dict)
    websocket: Seen = field(default_factory=dict)
    terminal: Seen = field(default_factory=dict)
    cpu_s: float = 0.0
    exit_code: int | None = None


def _note(seen: Seen, data: bytes, carry: bytes) -> bytes:
    """Record each complete BENCHLINE's latency in ``seen``; return the incomplete rest."""
    now = time.time()
    *lines, rest = (carry + data).split(b"\n")
    for line in lines:
        match = LINE_RE.search(line)
        if match:
            seen.setdefault(int(match.group(1)), now - float(match.group(2)))
    return rest


def _watch_file(logs_glob: str, seen: Seen, stop: threading.Event) -> None:
    handle = None
    carry = b""
    while not stop.is_set():
        if handle is None:
            found = glob.glob(logs_glob)
            if not found:
                time.sleep(0.005)
                continue
            handle = open(found[0], "rb")  # noqa: SIM115 - kept open while the job writes
        data = handle.read()
        if data:
            carry = _note(seen, data, carry)
        else:
            time.sleep(0.005)
    if handle is not None:
        handle.close()


def _watch_http(address: str, token: str, job_id: str, watch: Watch, stop: threading.Event) -> None:
    """The State API stream and the Jobs API websocket, side by side, each from its first chance."""
    import aiohttp

    async def driver(session: aiohttp.ClientSession) -> str:
        while not stop.is_set():
            async with session.get(f"{address}/api/jobs/{job_id}") as resp:
                node = (await resp.json()).get("driver_node_id") if resp.status == 200 else None
            if node:
                return str(node)
            await asyncio.sleep(0.02)
        raise asyncio.CancelledError

    async def stream(session: aiohttp.ClientSession, node: str) -> None:
        params = {"node_id": node, "filename": f"job-driver-{job_id}.log", "lines": "-1", "interval": "0.1"}
        while not stop.is_set():  # the file may not be there yet for a moment
            async with session.get(f"{address}/api/v0/logs/stream", params=params,
                                   timeout=aiohttp.ClientTimeout(total=None)) as resp:
                if resp.status == 200:
                    carry = b""
                    async for chunk in resp.content.iter_any():
                        carry = _note(watch.stream, chunk, carry)
                    return
            await asyncio.sleep(0.02)

    async def websocket(session: aiohttp.ClientSession) -> None:
        async with session.ws_connect(f"ws{address[4:]}/api/jobs/{job_id}/logs/tail") as ws:
            carry = b""
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    carry = _note(watch.websocket, msg.data.encode(), carry)

    async def main() -> None:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            node = await driver(session)
            tasks = [asyncio.create_task(stream(session, node)), asyncio.create_task(websocket(session))]
            while not stop.is_set():
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # The run ended before the driver was seen, or the server went away: the rows say what was seen.
    with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, OSError):
        asyncio.run(main())


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def watch_one(cmd: list[str], env: dict[str, str], job_id: str, address: str, token: str, logs_dir: str,
              timeout: float = 120) -> Watch:
    """Run one following CLI on a pty while watching its job's line at every step."""
    watch = Watch()
    stop = threading.Event()
    watchers = [
        threading.Thread(target=_watch_file, args=(f"{logs_dir}/job-driver-{job_id}.log", watch.file, stop),
                         daemon=True),
        threading.Thread(target=_watch_http, args=(address, token, job_id, watch, stop), daemon=True),
    ]
    for thread in watchers:
        thread.start()
    cpu_before = _children_cpu_s()
    carry = b""

    def on_chunk(chunk: bytes) -> None:
        nonlocal carry
        carry = _note(watch.terminal, chunk, carry)

    try:
        watch.exit_code, _ = read_pty(cmd, env, on_chunk, timeout)
    finally:
        stop.set()
        for thread in watchers:
            thread.join(timeout=10)
    watch.cpu_s = _children_cpu_s() - cpu_before
    return watch


def ray_submit_watched(b: Any, c: Any, job_id: str, entry: str) -> Watch:
    """The peer of the live-log rows: ``ray job submit`` of ``entry`` (the project's working dir) on run.py's
    embedded cluster (``b``: run.py's module, ``c`` its Context), followed on a pty; the job is noted finished."""
    cmd = [b.RAY, "job", "submit", "--address", c.cluster.address, "--submission-id", job_id,
           "--working-dir", c.env["RTJOB_PROJECT"], "--", *entry.split()]
    watch = watch_one(cmd, b.ray_env(c), job_id, c.cluster.address, c.cluster.token,
                      f"{c.cluster.temp_dir}/session_latest/logs")
    c.finished_jobs.append(job_id)
    return watch


def _median(seen: Seen) -> str:
    return f"{statistics.median(seen.values()):.3f} s" if seen else "—"


def _first(seen: Seen) -> str:
    return f"{seen[0]:.3f} s" if 0 in seen else "—"


def _ratio(a: Seen, b: Seen, pick: Callable[[Seen], float]) -> str:
    try:
        return f"{pick(a) / pick(b):.2f}× (rtjob/ray)"
    except (ValueError, KeyError, ZeroDivisionError, statistics.StatisticsError):
        return "—"


def run_loglat_bench(*, rtjob_cmd: list[str], rtjob_env: dict[str, str], rtjob_id: str, ray_cmd: list[str],
                     ray_env: dict[str, str], ray_id: str, address: str, token: str, logs_dir: str,
                     notes: list[str]) -> list[dict[str, str]]:
    """Rows (measurement, rtjob, peer, ratio, goal, met) splitting the print → terminal latency by step."""
    rt = watch_one(rtjob_cmd, rtjob_env, rtjob_id, address, token, logs_dir)
    peer = watch_one(ray_cmd, ray_env, ray_id, address, token, logs_dir)
    for name, watch in (("rtjob", rt), ("ray job submit", peer)):
        if watch.exit_code != 0:
            notes.append(f"4d–4h: {name} exited {watch.exit_code}")
    median_of: Callable[[Seen], float] = lambda seen: statistics.median(seen.values())  # noqa: E731
    steady = {i: v for i, v in rt.terminal.items() if i >= 20}  # after any start-up catch-up
    peer_steady = {i: v for i, v in peer.terminal.items() if i >= 20}
    both_file = {**rt.file, **{k + 1000: v for k, v in peer.file.items()}}
    both_stream = {**rt.stream, **{k + 1000: v for k, v in peer.stream.items()}}
    both_ws = {**rt.websocket, **{k + 1000: v for k, v in peer.websocket.items()}}
    return [
        dict(measurement="4d. … of which print → driver log file, median (both runs; Ray sets PYTHONUNBUFFERED=1 "
                         "for the driver, rtjob's jobs have it too)",
             rtjob=_median(both_file), peer="(same file)", ratio="—", goal="—", met="—"),
        dict(measurement="4e. … of which log file → reader: State API stream (interval 0.1 s; rtjob) vs Jobs API "
                         "websocket (`ray job submit`), median, read beside each CLI (both runs)",
             rtjob=_median(both_stream), peer=_median(both_ws),
             ratio=_ratio(both_stream, both_ws, median_of), goal="—", met="—"),
        dict(measurement="4f. … steady state (lines 20–39) print → terminal, median",
             rtjob=_median(steady), peer=_median(peer_steady), ratio=_ratio(steady, peer_steady, median_of),
             goal="—", met="—"),
        dict(measurement="4g. … first line print → terminal (how soon the follower catches up after the driver "
                         "starts)",
             rtjob=_first(rt.terminal), peer=_first(peer.terminal),
             ratio=_ratio(rt.terminal, peer.terminal, lambda seen: seen[0]), goal="—", met="—"),
        dict(measurement="4h. CPU seconds the following CLI used (its process and children, spawn to exit, "
                         "one 4 s run)",
             rtjob=f"{rt.cpu_s:.2f} s", peer=f"{peer.cpu_s:.2f} s",
             ratio=f"{rt.cpu_s / peer.cpu_s:.2f}× (rtjob/ray)" if peer.cpu_s else "—", goal="—", met="—"),
    ]


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def follow_cpu(b: Any, c: Any, window_s: float = 15.0) -> list[str]:
    """Steady following's CPU: a job printing a line a second, followed by nobody, `rtjob logs -f` and `ray job
    logs -f`; the CPU cores the cluster's processes (by kind) and the CLI used over ``window_s``, after start-up."""
    entry = "python emitter.py 90 1"
    (Path(c.env["RTJOB_PROJECT"]) / "jobs" / "bench-slow.yaml").write_text(
        f"name: bench-slow\nstrategy: custom\nentrypoint: {entry}\n")
    kinds: dict[str, list[int]] = {}
    for pid in b.our_leftovers(c, c.cluster.temp_dir):
        command = b.command_of(pid)
        kind = next((k for k in ("gcs_server", "raylet", "dashboard", "Agent", "log_monitor") if k in command),
                    "dashboard, agents, workers")
        kinds.setdefault(kind, []).append(pid)
    lines = []
    for who in ("nobody", "rtjob logs -f", "ray job logs -f"):
        job = f"bench-cpu-{os.urandom(2).hex()}"
        b.run_checked([b.RTJOB, "submit", "bench-slow", "--submission-id", job, "--no-wait"], c.env)
        deadline = time.monotonic() + 60
        while b.job_status(c.cluster, job) != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        cli = None
        if who.startswith("rtjob"):
            cli = subprocess.Popen([b.RTJOB, "logs", job, "--follow"], env=c.env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        elif who.startswith("ray"):
            cli = subprocess.Popen([b.RAY, "job", "logs", job, "--follow", "--address", c.cluster.address],
                                   env=b.ray_env(c), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(6)  # past the CLI's start-up and the replay of the log so far
        pids = {kind: list(found) for kind, found in kinds.items()}
        if cli is not None:
            pids["the CLI"] = [cli.pid]
        before = {pid: _cpu_s(pid) for found in pids.values() for pid in found}
        time.sleep(window_s)
        used = {kind: sum(_cpu_s(pid) - before[pid] for pid in found) / window_s for kind, found in pids.items()}
        lines.append(f"followed by {who}: " + ", ".join(f"{kind} {cores:.3f}" for kind, cores in used.items())
                     + f" cores (load {os.getloadavg()[0]:.2f})")
        if cli is not None:
            cli.kill()
            cli.wait(timeout=10)
        b.stop_and_wait(c.cluster, job)
    return lines


def main() -> int:
    """Standalone: a private embedded cluster (benchmarks/run.py's), both runs, the rows printed; then the CPU
    of steady following (not in `make bench`: it takes a minute)."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run as bench  # noqa: PLC0415 - run.py's cluster and project helpers

    work = Path(tempfile.mkdtemp(prefix="rtjob-loglat-", dir="/tmp"))
    ctx = bench.Context(work=work, env=bench.base_env(work))
    bench.make_project(work / "project")
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with bench.embedded_cluster(ctx):
        rows = loglat_rows(bench, ctx)
        cpu = follow_cpu(bench, ctx)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for row in rows:
        print(" | ".join(row.values()))
    print("\nCPU of steady following (a line a second):")
    for line in cpu:
        print(f"- {line}")
    for note in ctx.notes:
        print(f"- {note}")
    return 0


def loglat_rows(b: Any, c: Any) -> list[dict[str, str]]:
    """The rows, with run.py's helpers (``b``: the module) and its Context (``c``, a cluster up)."""
    rt_id = f"bench-loglat-rt-{os.urandom(2).hex()}"
    ray_id = f"bench-loglat-ray-{os.urandom(2).hex()}"
    ray_cmd = [b.RAY, "job", "submit", "--address", c.cluster.address, "--submission-id", ray_id,
               "--working-dir", c.env["RTJOB_PROJECT"], "--", *b.log_entrypoint().split()]
    rows = run_loglat_bench(
        rtjob_cmd=[b.RTJOB, "submit", "bench-logs", "--submission-id", rt_id], rtjob_env=c.env, rtjob_id=rt_id,
        ray_cmd=ray_cmd, ray_env=b.ray_env(c), ray_id=ray_id, address=c.cluster.address, token=c.cluster.token,
        logs_dir=f"{c.cluster.temp_dir}/session_latest/logs", notes=c.notes,
    )
    c.finished_jobs.extend([rt_id, ray_id])
    return rows


if __name__ == "__main__":
    sys.exit(main())
