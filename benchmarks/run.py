#!/usr/bin/env python3
"""rtjob's benchmark suite: rtjob against its closest peer, measured side by side in one run.

    make bench            (= python benchmarks/run.py)

Every figure is a ratio against a peer measured in the same run on the same machine, so a slow or busy
machine moves both sides together. Measurements:

1. CLI start-up:     `rtjob submit --help`  vs `ray job submit --help`
2. status:           `rtjob status ID`      vs `ray job status ID` (same finished job, embedded cluster)
3. submit→RUNNING:   `rtjob submit --no-wait` vs a bare JobSubmissionClient script
4. log latency:      `rtjob submit` (following) vs `ray job submit`, print → terminal, per line

The cluster measurements use a private embedded cluster (`rtjob local up` with a private RTJOB_HOME) that
is always stopped with `rtjob local down` — never `ray stop`, which would end every Ray process on the
machine, other people's clusters included. A measurement that fails is reported as failed, with why.
Results go to benchmarks/results.md and stdout. Exit status: 0 when every measurement was taken (whether or
not it met its goal: the table says), 1 when one could not be taken, 2 when the venv is missing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

# One row of results.md (run as a script, this folder is on sys.path; ddp_vs_torchrun imports only the stdlib).
from ddp_vs_torchrun import BenchRow as Row  # noqa: E402
from ptyread import read_pty  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results.md"
# The venv the project installs into; fall back to the interpreter running us (e.g. an activated venv).
BIN = ROOT / ".venv" / "bin" if (ROOT / ".venv" / "bin" / "rtjob").exists() else Path(sys.executable).parent
RTJOB, RAY, PYTHON = str(BIN / "rtjob"), str(BIN / "ray"), str(BIN / "python")

# Sizes: the machine has 2 cores and the whole run must stay under ~4 minutes.
N_HELP = 7          # runs per side, after one warm-up each
N_STATUS = 7
N_SUBMIT = 5
K_LINES = 40        # lines the log job prints ...
LINE_GAP_S = 0.1    # ... this far apart
LOG_LATENCY_GOAL_S = 0.3  # 4a: median print → terminal (issue 13)
POLL_S = 0.05       # how often the submit→RUNNING observer polls the Jobs API
SLEEP_JOB_S = 20    # the submit job's sleep; it is stopped as soon as RUNNING is seen

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
# Variables that would point rtjob or ray at some other cluster or project than the private one.
FOREIGN_ENV = (
    "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_JOB_HEADERS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN_PATH", "RTJOB_ADDRESS", "RTJOB_BACKEND", "RTJOB_STORAGE", "RTJOB_COMPUTE_CONFIG",
    "RTJOB_VERIFY_TLS", "PYTHONUNBUFFERED",
)
T = TypeVar("T")
LINE_RE = re.compile(rb"BENCHLINE (\d+) (\d+\.\d+)")


class BenchError(Exception):
    """A measurement could not be taken; its message is the reason shown in the table."""


@dataclass
class Cluster:
    address: str
    token: str
    token_path: str
    temp_dir: str


@dataclass
class Context:
    work: Path
    env: dict[str, str]
    cluster: Cluster | None = None
    finished_jobs: list[str] = field(default_factory=list)  # candidates for the status measurement
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# small helpers


def median(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    # Nearest-rank percentile: with 40 samples it is an actual observed latency, not an interpolation.
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def secs(value: float) -> str:
    return f"{value:.3f} s"


def spread(values: list[float]) -> str:
    """Median with min–max, so a reader sees how noisy the runs were."""
    return f"{secs(median(values))} ({min(values):.3f}–{max(values):.3f})"


def tail(text: str, lines: int = 2) -> str:
    """The last lines of some output, for a failure reason (traceback carets dropped: they say nothing)."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip(" ^~\t")][-lines:]
    return " | ".join(kept)[:240] or "(no output)"


def show(cmd: list[str]) -> str:
    return " ".join([Path(cmd[0]).name, *cmd[1:4]]) + (" ..." if len(cmd) > 4 else "")


def run_checked(cmd: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BenchError(f"`{show(cmd)}` timed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise BenchError(f"`{show(cmd)}` exited {proc.returncode}: {tail(proc.stderr or proc.stdout)}")
    return proc


def time_command(cmd: list[str], env: dict[str, str], expect: str | None = None) -> float:
    """Wall time of one subprocess, from spawn to exit (what a user at a prompt waits)."""
    start = time.perf_counter()
    proc = run_checked(cmd, env)
    elapsed = time.perf_counter() - start
    # Case-insensitive: `ray job status` says "succeeded" in one line and "SUCCEEDED" in another.
    if expect and expect.lower() not in (proc.stdout + proc.stderr).lower():
        raise BenchError(f"`{show(cmd)}` did not print {expect!r}: {tail(proc.stdout + proc.stderr)}")
    return elapsed


def alternate(n: int, first: Callable[[], T], second: Callable[[], T]) -> tuple[list[T], list[T]]:
    """One warm-up of each (page cache, .pyc files), then n runs of each, interleaved so drift hits both."""
    first()
    second()
    a: list[T] = []
    b: list[T] = []
    for _ in range(n):
        a.append(first())
        b.append(second())
    return a, b


def kill(proc: subprocess.Popen[bytes]) -> None:
    """End a subprocess we started (by its own handle), if it is still running."""
    if proc.poll() is None:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def stop(proc: subprocess.Popen[bytes], grace: float = 10) -> None:
    """Ask a subprocess we started to end (SIGTERM), then kill it if it has not within ``grace`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    kill(proc)


# ---------------------------------------------------------------------------------------------
# the Jobs REST API, spoken directly (stdlib only, so the observer costs the same for both sides)


def api(cluster: Cluster, method: str, path: str) -> dict[str, object] | None:
    req = urllib.request.Request(
        f"{cluster.address}{path}", method=method, headers={"Authorization": f"Bearer {cluster.token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None  # not submitted (yet)
        raise BenchError(f"{method} {path}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BenchError(f"{method} {path}: {exc}") from None


def job_status(cluster: Cluster, job_id: str) -> str | None:
    data = api(cluster, "GET", f"/api/jobs/{job_id}")
    return str(data["status"]) if data else None


def job_summary(cluster: Cluster, job_id: str) -> str:
    """`STATUS: first line of the message`, for failure reasons."""
    try:
        data = api(cluster, "GET", f"/api/jobs/{job_id}")
    except BenchError as exc:
        return str(exc)
    if data is None:
        return "never submitted"
    message = str(data.get("message") or "").strip().splitlines()
    return f"{data['status']}" + (f": {message[0][:160]}" if message else "")


def stop_and_wait(cluster: Cluster, job_id: str, timeout: float = 30) -> str | None:
    """Stop a job and wait until it has ended, so the next measurement starts on a quiet cluster."""
    with contextlib.suppress(BenchError):
        api(cluster, "POST", f"/api/jobs/{job_id}/stop")
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = job_status(cluster, job_id)
        if status is None or status in TERMINAL:
            return status
        time.sleep(0.2)
    return status


# ---------------------------------------------------------------------------------------------
# the private project and cluster

SLEEPER = """\
# The submit→RUNNING job: just stays alive until the benchmark stops it.
import sys
import time

time.sleep(float(sys.argv[1]))
"""

EMITTER = """\
# The log-latency job: each line carries the time it was printed, so the reader can compute latency.
import sys
import time

count, gap = int(sys.argv[1]), float(sys.argv[2])
for i in range(count):
    print(f"BENCHLINE {i} {time.time():.6f}", flush=True)
    time.sleep(gap)
"""

# Submits like any program that uses Ray's SDK directly: no rtjob code, same entrypoint, working dir and
# Authorization header; then polls until RUNNING, as a script that waits for its job would.
RAW_SUBMIT = """\
import os
import sys
import time

from ray.job_submission import JobStatus, JobSubmissionClient

address, submission_id, working_dir, entrypoint = sys.argv[1:5]
client = JobSubmissionClient(
    address, headers={"Authorization": "Bearer " + os.environ["BENCH_TOKEN"]}, create_cluster_if_needed=False
)
client.submit_job(entrypoint=entrypoint, submission_id=submission_id, runtime_env={"working_dir": working_dir})
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    status = client.get_job_status(submission_id)
    if status == JobStatus.RUNNING:
        sys.exit(0)
    if status.is_terminal():
        sys.exit(f"job ended {status} before RUNNING was seen")
    time.sleep(0.05)
sys.exit("RUNNING not seen within 60s")
"""


def sleep_entrypoint() -> str:
    return f"python sleeper.py {SLEEP_JOB_S}"


def log_entrypoint() -> str:
    return f"python emitter.py {K_LINES} {LINE_GAP_S}"


def make_project(project: Path) -> None:
    """A tiny rtjob project: two job specs and a small working dir (the project root is the working dir)."""
    (project / "jobs").mkdir(parents=True)
    (project / "sleeper.py").write_text(SLEEPER)
    (project / "emitter.py").write_text(EMITTER)
    (project / "data.txt").write_text("payload line\n" * 2000)  # ~26 KB, so the upload is not empty
    (project / "jobs" / "bench-sleep.yaml").write_text(
        f"name: bench-sleep\nstrategy: custom\nentrypoint: {sleep_entrypoint()}\n"
    )
    (project / "jobs" / "bench-logs.yaml").write_text(
        f"name: bench-logs\nstrategy: custom\nentrypoint: {log_entrypoint()}\n"
    )


def base_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env.update(
        RTJOB_HOME=str(work / "home"),
        RTJOB_PROJECT=str(work / "project"),
        RAY_USAGE_STATS_ENABLED="0",
        PATH=os.pathsep.join([str(BIN), env.get("PATH", "")]),
    )
    return env


def ray_env(ctx: Context) -> dict[str, str]:
    """What `ray job ...` needs to talk to a token-auth cluster."""
    assert ctx.cluster is not None
    return {**ctx.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": ctx.cluster.token_path}


def processes_mentioning(text: str, in_environ: bool = False) -> list[int]:
    """PIDs whose command line (or environment) contains ``text``, read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / ("environ" if in_environ else "cmdline")).read_bytes()
        except OSError:
            continue
        if text in raw.replace(b"\0", b" ").decode(errors="replace"):
            pids.append(int(entry.name))
    return pids


def alive(pid: int) -> bool:
    """Running, not a zombie (an exited child nobody reaped yet is gone for our purposes)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def our_leftovers(ctx: Context, temp_dir: str | None) -> list[int]:
    """Processes of the benchmark's cluster still alive: every process `rtjob local up` started inherits
    our private RTJOB_HOME (unique to this run) and Ray's daemons name the cluster's temp dir; nothing else
    on the machine matches either."""
    found = set(processes_mentioning(f"RTJOB_HOME={ctx.env['RTJOB_HOME']} ", in_environ=True))
    if temp_dir:
        found.update(processes_mentioning(temp_dir))
    return sorted(pid for pid in found if alive(pid))


def command_of(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:90].strip()
    return f"pid {pid}"


def end_processes(pids: list[int]) -> None:
    """SIGTERM, a grace period, then SIGKILL: only PIDs that our_leftovers() showed to be ours."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 1.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.2)


def load_cluster(env: dict[str, str]) -> Cluster | None:
    try:
        state = json.loads((Path(env["RTJOB_HOME"]) / "local" / "cluster.json").read_text())
        token = Path(state["token_path"]).read_text().strip()
    except (OSError, ValueError, KeyError):
        return None
    return Cluster(state["address"], token, state["token_path"], state["temp_dir"])


def cluster_down(ctx: Context) -> None:
    """`rtjob local down`, then make sure nothing of our cluster is left (and say so if something was)."""
    state_file = Path(ctx.env["RTJOB_HOME"]) / "local" / "cluster.json"
    temp_dir = ctx.cluster.temp_dir if ctx.cluster else None
    if temp_dir is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            temp_dir = json.loads(state_file.read_text()).get("temp_dir")
    if state_file.exists():
        try:
            run_checked([RTJOB, "local", "down"], ctx.env, timeout=90)
        except BenchError as exc:
            ctx.notes.append(f"`rtjob local down` failed: {exc}")
    time.sleep(1)
    left = our_leftovers(ctx, temp_dir)
    if left:
        what = "; ".join(f"`{command_of(pid)}`" for pid in left)
        end_processes(left)
        still = our_leftovers(ctx, temp_dir)
        ctx.notes.append(f"`rtjob local down` left {len(left)} process(es) of the benchmark's cluster running "
                         f"({what}); the benchmark ended them" + (f", except PIDs {still}" if still else ""))
    elif temp_dir:
        ctx.notes.append(f"after `rtjob local down` no process of the benchmark's cluster is left ({temp_dir})")


@contextlib.contextmanager
def embedded_cluster(ctx: Context) -> Iterator[Cluster]:
    try:
        start = time.perf_counter()
        try:
            run_checked([RTJOB, "local", "up", "--nodes", "1"], ctx.env, timeout=180)
        except BenchError as exc:
            # One retry, reported: a start-up failure is worth knowing about but is not what is measured here.
            ctx.notes.append(f"first `rtjob local up` failed, retried once: {exc}")
            cluster_down(ctx)
            run_checked([RTJOB, "local", "up", "--nodes", "1"], ctx.env, timeout=180)
        ctx.cluster = load_cluster(ctx.env)
        if ctx.cluster is None:
            raise BenchError("`rtjob local up` succeeded but left no readable cluster.json / token")
        ctx.notes.append(f"embedded cluster started in {time.perf_counter() - start:.1f} s at {ctx.cluster.address}")
        yield ctx.cluster
    finally:
        cluster_down(ctx)


# ---------------------------------------------------------------------------------------------
# 1. CLI start-up


def bench_help(ctx: Context) -> list[Row]:
    rt, peer = alternate(
        N_HELP,
        lambda: time_command([RTJOB, "submit", "--help"], ctx.env, expect="Usage"),
        lambda: time_command([RAY, "job", "submit", "--help"], ctx.env, expect="Usage"),
    )
    speedup = median(peer) / median(rt)
    return [Row(f"1. CLI start-up: `submit --help` (median of {N_HELP})", spread(rt), spread(peer),
                f"{speedup:.1f}× faster", "rtjob ≥5× faster", yes(speedup >= 5))]


def yes(ok: bool) -> str:
    return "yes" if ok else "**NO**"


# ---------------------------------------------------------------------------------------------
# 2. status of one finished job


def finished_job(ctx: Context) -> tuple[str, str]:
    """A job that has ended (preferably a SUCCEEDED one from the log measurement)."""
    assert ctx.cluster is not None
    seen = []
    for job_id in ctx.finished_jobs:
        status = job_status(ctx.cluster, job_id)
        seen.append(f"{job_id}={status}")
        if status in TERMINAL:
            return job_id, status
    raise BenchError(f"no finished job to ask about (candidates: {', '.join(seen) or 'none'})")


def bench_loglat(ctx: Context) -> list[Row]:
    """Issue 13: where 4a's time goes, step by step, and the followers' CPU (benchmarks/loglat_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.loglat_bench import loglat_rows

    return _rows(loglat_rows(sys.modules[__name__], ctx))


def bench_status(ctx: Context) -> list[Row]:
    assert ctx.cluster is not None
    job_id, status = finished_job(ctx)
    address = ctx.cluster.address
    rt, peer = alternate(
        N_STATUS,
        lambda: time_command([RTJOB, "status", job_id], ctx.env, expect=status),
        lambda: time_command([RAY, "job", "status", job_id, "--address", address], ray_env(ctx), expect=status),
    )
    speedup = median(peer) / median(rt)
    return [Row(f"2. `status ID` of a finished job (median of {N_STATUS})", spread(rt), spread(peer),
                f"{speedup:.1f}× faster", "rtjob ≥2× faster", yes(speedup >= 2))]


# ---------------------------------------------------------------------------------------------
# 3. submit → RUNNING


def until_running(ctx: Context, cmd: list[str], env: dict[str, str], job_id: str, label: str) -> tuple[float, float]:
    """Seconds from spawning ``cmd`` until the Jobs API shows ``job_id`` at all (the submit was accepted:
    the client's share), and until it reports it RUNNING (polled every 50 ms).

    The observer is this process for both sides, so both are timed by the same clock and the same poll.
    """
    assert ctx.cluster is not None
    log = ctx.work / f"{label}.log"
    with log.open("wb") as out:
        start = time.monotonic()
        accepted = None
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            while True:
                status = job_status(ctx.cluster, job_id)
                if status is not None and accepted is None:
                    accepted = time.monotonic() - start
                if status == "RUNNING":
                    elapsed = time.monotonic() - start
                    break
                if status in TERMINAL:
                    raise BenchError(f"{label}: job ended before RUNNING was observed ({job_summary(ctx.cluster, job_id)})")
                if proc.poll() not in (None, 0):
                    raise BenchError(f"{label}: exited {proc.returncode}: {tail(log.read_text(errors='replace'))}")
                if time.monotonic() - start > 60:
                    raise BenchError(f"{label}: RUNNING not observed within 60 s ({job_summary(ctx.cluster, job_id)})")
                time.sleep(POLL_S)
            if proc.wait(timeout=60) != 0:
                raise BenchError(f"{label}: exited {proc.returncode}: {tail(log.read_text(errors='replace'))}")
        finally:
            kill(proc)
            stop_and_wait(ctx.cluster, job_id)
    assert accepted is not None
    return accepted, elapsed


def bench_submit(ctx: Context) -> list[Row]:
    assert ctx.cluster is not None
    project = ctx.env["RTJOB_PROJECT"]
    raw_script = ctx.work / "raw_submit.py"
    raw_script.write_text(RAW_SUBMIT)
    raw_env = {**ctx.env, "BENCH_TOKEN": ctx.cluster.token}
    address = ctx.cluster.address
    counter = iter(range(1000))

    def rtjob_once() -> tuple[float, float]:
        # --submission-id only so the observer knows the id before rtjob prints it; rtjob's extra GET
        # for an existing run with that id is part of what is measured.
        job_id = f"bench-rt-{next(counter)}-{os.urandom(2).hex()}"
        cmd = [RTJOB, "submit", "bench-sleep", "--no-wait", "--submission-id", job_id]
        return until_running(ctx, cmd, ctx.env, job_id, job_id)

    def raw_once() -> tuple[float, float]:
        job_id = f"bench-raw-{next(counter)}-{os.urandom(2).hex()}"
        cmd = [PYTHON, str(raw_script), address, job_id, project, sleep_entrypoint()]
        return until_running(ctx, cmd, raw_env, job_id, job_id)

    rt_pairs, raw_pairs = alternate(N_SUBMIT, rtjob_once, raw_once)
    rt, raw = [r for _, r in rt_pairs], [r for _, r in raw_pairs]
    rt_acc, raw_acc = [a for a, _ in rt_pairs], [a for a, _ in raw_pairs]
    ratio = median(rt) / median(raw)
    return [
        Row(f"3. submit → RUNNING (median of {N_SUBMIT})", spread(rt), spread(raw),
            f"{ratio:.2f}× (rtjob/raw)", "rtjob/raw ≤1.2×", yes(ratio <= 1.2)),
        # The same runs, split: the client's share (spawn → the job exists) is what rtjob controls;
        # the rest (PENDING → RUNNING) is the cluster's and the same code for both.
        Row("3b. … of which spawn → job accepted (PENDING seen)", spread(rt_acc), spread(raw_acc),
            f"{median(rt_acc) / median(raw_acc):.2f}× (rtjob/raw)", "—", "—"),
    ]


# ---------------------------------------------------------------------------------------------
# 4. log latency, print → terminal


@dataclass
class Arrivals:
    latencies: list[float]  # one per distinct line, from its first arrival
    distinct: int
    duplicates: int
    exit_code: int | None

    @property
    def lost(self) -> int:
        return K_LINES - self.distinct

    def lines(self) -> str:
        return f"{self.distinct}/{K_LINES} ({self.lost} lost, {self.duplicates} dup)"


def read_lines_from_pty(cmd: list[str], env: dict[str, str], log: Path, timeout: float = 90) -> Arrivals:
    """Run ``cmd`` with its stdout on a pseudo-terminal (ptyread.py says why) and stamp each BENCHLINE when it
    arrives."""
    counts: Counter[int] = Counter()
    latencies: list[float] = []
    buffer = b""

    def on_chunk(chunk: bytes) -> None:
        nonlocal buffer
        now = time.time()  # same wall clock as the job's time.time() (same machine)
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            match = LINE_RE.search(line)
            if match:
                index = int(match.group(1))
                counts[index] += 1
                if counts[index] == 1:
                    latencies.append(now - float(match.group(2)))

    with log.open("wb") as err:
        code, timed_out = read_pty(cmd, env, on_chunk, timeout, stderr=err)
    if timed_out:
        raise BenchError(f"{cmd[0]} still following after {timeout:.0f} s")
    valid = {i for i in counts if 0 <= i < K_LINES}
    return Arrivals(latencies, len(valid), sum(counts.values()) - len(counts), code)


def bench_logs(ctx: Context) -> list[Row]:
    assert ctx.cluster is not None
    rt_id = f"bench-logs-rt-{os.urandom(2).hex()}"
    ray_id = f"bench-logs-ray-{os.urandom(2).hex()}"
    rt = read_lines_from_pty([RTJOB, "submit", "bench-logs", "--submission-id", rt_id], ctx.env,
                             ctx.work / "logs-rtjob.err")
    ctx.finished_jobs.append(rt_id)
    peer_cmd = [RAY, "job", "submit", "--address", ctx.cluster.address, "--submission-id", ray_id,
                "--working-dir", ctx.env["RTJOB_PROJECT"], "--", *log_entrypoint().split()]
    peer = read_lines_from_pty(peer_cmd, ray_env(ctx), ctx.work / "logs-ray.err")
    ctx.finished_jobs.append(ray_id)
    for name, arrivals, job_id in (("rtjob", rt, rt_id), ("ray", peer, ray_id)):
        if arrivals.exit_code != 0:
            err = (ctx.work / f"logs-{name}.err").read_text(errors="replace")
            ctx.notes.append(f"log job via {name} ({job_id}): CLI exited {arrivals.exit_code} ({tail(err)}); "
                             f"job {job_summary(ctx.cluster, job_id)}")
        if not arrivals.latencies:
            raise BenchError(f"{name} printed none of the job's {K_LINES} lines (see notes)")
    ok_med = median(rt.latencies) <= LOG_LATENCY_GOAL_S
    ok_lines = rt.lost == 0 and rt.duplicates == 0
    return [
        Row(f"4a. log latency print → terminal, median ({K_LINES} lines, {LINE_GAP_S:g} s apart)",
            spread(rt.latencies), spread(peer.latencies),
            f"{median(rt.latencies) / median(peer.latencies):.2f}× (rtjob/ray)", f"rtjob ≤{LOG_LATENCY_GOAL_S:g} s",
            yes(ok_med)),
        Row("4b. log latency, p95", secs(p95(rt.latencies)), secs(p95(peer.latencies)),
            f"{p95(rt.latencies) / p95(peer.latencies):.2f}× (rtjob/ray)", "—", "—"),
        Row("4c. log lines delivered", rt.lines(), peer.lines(), "—",
            f"{K_LINES}/{K_LINES}, 0 lost, 0 dup", yes(ok_lines)),
    ]


# ---------------------------------------------------------------------------------------------
# running it all, honestly


def guarded(names: list[str], func: Callable[[Context], list[Row]], ctx: Context) -> list[Row]:
    """Run one measurement; on any failure report it as failed with the reason, never a made-up number."""
    start = time.perf_counter()
    try:
        rows = func(ctx)
    except Exception as exc:  # noqa: BLE001 - any failure becomes a visible row, the run goes on
        reason = f"failed: {exc}".replace("|", "/").replace("\n", " ")
        rows = [Row(name, reason, "—", "—", "—", "**FAILED**") for name in names]
    print(f"  {names[0].split(':')[0].split(' (')[0]} done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return rows


def _rows(dicts: list[dict[str, str]] | list[tuple[str, ...]], number: int | None = None) -> list[Row]:
    """Rows for the table; with ``number``, labelled 6a., 6b., ... in their order (the table is sorted by label)."""
    rows = [Row(**d) if isinstance(d, dict) else Row(*d) for d in dicts]
    if number is None:
        return rows
    return [row._replace(measurement=f"{number}{chr(ord('a') + i)}. {re.sub(r'^([PR][0-9]+b?|[0-9]+[a-z]?)[.] ', '', row.measurement)}")
            for i, row in enumerate(rows)]


def bench_fsdp_memory(ctx: Context) -> list[Row]:
    """Issue 3: FSDP2 vs DDP parameter + optimizer memory per rank (benchmarks/training_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.training_bench import fsdp_vs_ddp_memory

    return _rows(fsdp_vs_ddp_memory())


def bench_train_throughput(ctx: Context) -> list[Row]:
    """Issue 3: Ray Train DDP vs torchrun DDP on the same model and batch (benchmarks/ddp_vs_torchrun.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.ddp_vs_torchrun import bench_ddp_vs_torchrun

    return _rows(bench_ddp_vs_torchrun(python=PYTHON, notes=ctx.notes), 6)


def bench_coldstart(ctx: Context) -> list[Row]:
    """Issue 13: the embedded cluster's cold start and submit → first log line vs by hand (benchmarks/coldstart_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.coldstart_bench import run_coldstart_bench

    return _rows(run_coldstart_bench([RTJOB], notes=ctx.notes), 10)


def bench_pull(ctx: Context) -> list[Row]:
    """Issues 4 and 13: `rtjob pull` vs s5cmd and the AWS CLI on trees served by SeaweedFS on loopback."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.pull_bench import run_pull_bench

    return _rows(run_pull_bench(notes=ctx.notes), 7)


def bench_ledger(ctx: Context) -> list[Row]:
    """Issue 12: `rtjob runs -o json --limit 10000` over 10,000 ledger entries (benchmarks/ledger_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.ledger_bench import ENTRIES, run_ledger_bench

    argv = [RTJOB, "runs", "-o", "json", "--limit", str(ENTRIES)]
    return _rows(run_ledger_bench(argv, notes=ctx.notes), 8)


def bench_ui(ctx: Context) -> list[Row]:
    """Issue 28: `rtjob ui`'s runs page over 10,000 ledger entries and a 40 MiB log's first screen
    (benchmarks/ui_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.ui_bench import run_ui_bench

    return _rows(run_ui_bench(notes=ctx.notes), 13)


def bench_parallel_submit(ctx: Context) -> list[Row]:
    """The start-up issue, part 4: 8 `submit --no-wait` at once to a running cluster against one alone
    (benchmarks/parallel_submit_bench.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from parallel_submit_bench import run_parallel_submit_bench

    return _rows(run_parallel_submit_bench([RTJOB], notes=ctx.notes), 14)


def bench_startup(ctx: Context) -> list[Row]:
    """The start-up issue, part 4: submit → first step of ddp-resnet on a running cluster against one process
    (benchmarks/startup_bench.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from startup_bench import run_startup_bench

    return _rows(run_startup_bench([RTJOB], notes=ctx.notes), 15)


def bench_queue(ctx: Context) -> list[Row]:
    """Issue 44: the queue keeper's hand-over and `rtjob queue` over 1,000 queued runs (benchmarks/queue_bench.py;
    folder storage, no cluster)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from queue_bench import run_queue_bench

    return _rows(run_queue_bench(notes=ctx.notes), 16)


def bench_queued_submit(ctx: Context) -> list[Row]:
    """Issue 44: `submit --queue --no-wait` against a plain `submit --no-wait` on the running cluster."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from queue_bench import queued_submit_rows

    rows = _rows(queued_submit_rows([RTJOB], ctx.env, Path(ctx.env["RTJOB_PROJECT"])))
    return [row._replace(measurement="16d. " + row.measurement) for row in rows]


def bench_queue_makespan(ctx: Context) -> list[Row]:
    """Issue 44: six 2-worker Ray Train jobs on a 2-node cluster, straight to Ray vs through a queue (each side on
    a fresh embedded cluster of its own, capped at 15 minutes; benchmarks/queue_makespan_bench.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from queue_makespan_bench import makespan_rows

    return _rows(makespan_rows())


def bench_ui_latency(ctx: Context) -> list[Row]:
    """Issue 28: a printed line → `rtjob ui`'s open run page vs `ray job submit` (benchmarks/ui_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.ui_bench import latency_rows

    return _rows(latency_rows(sys.modules[__name__], ctx))


def bench_livelog(ctx: Context) -> list[Row]:
    """Issue 36: a printed line → the run's stored log vs `ray job submit`, and the companion's CPU meanwhile
    (benchmarks/livelog_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.livelog_bench import livelog_rows

    return _rows(livelog_rows(sys.modules[__name__], ctx))


def bench_records(ctx: Context) -> list[Row]:
    """Issue 12: a team's runs listed from a bucket by their run records (benchmarks/records_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.records_bench import run_records_bench

    rows = _rows(run_records_bench(notes=ctx.notes), 9)
    ctx.notes.append("9: peer `aws s3 ls --recursive` against the same S3 server, walking every key of the tree "
                     "(it lists; it reads no record)")
    return rows


def bench_index(ctx: Context) -> list[Row]:
    """Issue 27: `rtjob runs --storage` over 100,000 runs served by the run index, beside the per-record listing
    at 10,000 records (benchmarks/index_bench.py; the seeded SeaweedFS bucket is reused between runs)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.index_bench import run_index_bench

    return _rows(run_index_bench(notes=ctx.notes), 11)


def bench_companion(ctx: Context) -> list[Row]:
    """Issue 25: the run-side companion's CPU over a training run, and the start-up timeline of cold and warm
    embedded submits (benchmarks/companion_bench.py)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.companion_bench import run_companion_bench

    return _rows(run_companion_bench(notes=ctx.notes), 12)


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        ram = f"{kib / 1024**2:.1f} GiB"
    return {"nproc": str(os.cpu_count()), "ram": ram, "cpu": cpu, "platform": platform.platform()}


def command_output(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def ray_version() -> str:
    return command_output([PYTHON, "-c", "import importlib.metadata as m; print(m.version('ray'))"]) or "unknown"


def other_raylets() -> int:
    """Ray nodes of other people's clusters on this machine: they share the 2 cores, so say so."""
    return len([p for p in processes_mentioning("raylet/raylet") if Path(f"/proc/{p}").exists()])


def render(rows: list[Row], meta: dict[str, str], notes: list[str]) -> str:
    header = "| measurement | rtjob | peer | ratio | goal | met? |\n|---|---|---|---|---|---|\n"
    body = "".join(f"| {r.measurement} | {r.rtjob} | {r.peer} | {r.ratio} | {r.goal} | {r.met} |\n" for r in rows)
    peers = textwrap.dedent("""\
        Peers: 1 `ray job submit --help`; 2 `ray job status ID --address …` (RAY_AUTH_MODE=token,
        RAY_AUTH_TOKEN_PATH); 3 a Python script using `ray.job_submission.JobSubmissionClient` (same entrypoint,
        working dir and Authorization header; polls until RUNNING); 4 `ray job submit --working-dir …` (follows logs).
        Times are wall-clock medians (min–max) over interleaved runs after one warm-up of each side. In 3, both
        sides are timed from process spawn until this process, polling `GET /api/jobs/<id>` every 50 ms, sees
        RUNNING; each job is stopped before the next run. In 4, each CLI's stdout is a pseudo-terminal; latency =
        arrival time − the `time.time()` the job printed on the line; 4d–4h: one more run of each, its line watched
        at every step (the driver's log file, the State API stream, the Jobs API websocket;
        benchmarks/loglat_bench.py). 5 DDP (`DistributedDataParallel`) on the same model, seed, steps and optimizer (benchmarks/training_bench.py); 6 `torchrun --standalone` running
        `training.torchrun_ddp` on the same model, data, seed and batch, at Ray's worker niceness
        (benchmarks/ddp_vs_torchrun.py); 7 s5cmd (Go) and the AWS CLI against the same SeaweedFS S3 server on loopback (benchmarks/pull_bench.py);
        8 none: Ray keeps no history of finished jobs once their cluster is gone (benchmarks/ledger_bench.py).
        10 by hand with Ray's CLI: `ray start --head` + `ray start --address` (1 CPU each, token auth, own temp
        dirs and agent ports), + `ray job submit` to the job's first line on a terminal (benchmarks/coldstart_bench.py).
        6e–6f: the same Ray Train run with Ray's defaults, i.e. without rtjob's embedded-cluster settings.
        """)
    lines = [
        "# rtjob benchmarks",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['nproc']} CPUs, {meta['ram']} RAM, {meta['cpu']} ({meta['platform']})",
        f"- ray {meta['ray']}; rtjob at {meta['commit']}",
        f"- command: `make bench` (= `{meta['command']}`); total run time {meta['runtime']}",
        f"- machine load at start: {meta['load']}; other Ray nodes (raylets) running: {meta['raylets']}",
        f"- rtjob's own modules: {meta['bytecode']}",
        "",
        header + body,
        peers,
        "Notes:",
        "",
        *[f"- {note}" for note in notes],
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    began = time.monotonic()
    meta = machine()
    meta.update(
        date=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        ray=ray_version(),
        command=f"python benchmarks/run.py  ({sys.executable} {' '.join(sys.argv)})",
        load=" ".join(f"{x:.2f}" for x in os.getloadavg()),
        raylets=str(other_raylets()),
    )
    commit = command_output(["git", "rev-parse", "--short", "HEAD"]) or "unknown commit"
    dirty = command_output(["git", "status", "--porcelain", "--", "cli"])
    meta["commit"] = commit + (" + uncommitted changes in cli/" if dirty else "")
    compiled = any((ROOT / "cli" / "rtjob" / "commands" / "__pycache__").glob("*.pyc"))
    meta["bytecode"] = ("byte-compiled before the run (`make bench`), as an installed wheel has them" if compiled else
                        "not byte-compiled: with PYTHONDONTWRITEBYTECODE every command compiles them again")

    for tool in (RTJOB, RAY, PYTHON):
        if not Path(tool).exists():
            print(f"benchmarks: {tool} not found; install the project into .venv first", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="rtjob-bench-", dir="/tmp"))
    ctx = Context(work=work, env=base_env(work))
    make_project(work / "project")
    print(f"benchmarks: private RTJOB_HOME {work / 'home'}", file=sys.stderr)
    rows: list[Row] = []
    cluster_rows = {
        "submit": ["3. submit → RUNNING", "3b. … of which spawn → job accepted"],
        "logs": ["4a. log latency print → terminal, median", "4b. log latency, p95", "4c. log lines delivered"],
        "loglat": ["4d. log latency, step by step"],
        "status": ["2. `status ID` of a finished job"],
        "ui": ["13d. `rtjob ui` printed line → page"],
        "live": ["14a. printed line → the run's stored log", "14b. the companion's CPU while the run prints"],
        "queued": ["16d. `submit --queue Q --no-wait` vs `submit --no-wait`"],
    }
    try:
        rows += guarded(["1. CLI start-up: `submit --help`"], bench_help, ctx)
        try:
            with embedded_cluster(ctx):
                rows += guarded(cluster_rows["submit"], bench_submit, ctx)
                rows += guarded(cluster_rows["logs"], bench_logs, ctx)
                rows += guarded(cluster_rows["loglat"], bench_loglat, ctx)
                rows += guarded(cluster_rows["status"], bench_status, ctx)
                rows += guarded(cluster_rows["ui"], bench_ui_latency, ctx)
                rows += guarded(cluster_rows["live"], bench_livelog, ctx)
                rows += guarded(cluster_rows["queued"], bench_queued_submit, ctx)  # last: its runs stay queued
        except BenchError as exc:
            # The cluster itself did not come up: every cluster measurement fails for that reason.
            done = {r.measurement.split(" (")[0] for r in rows}
            for names in cluster_rows.values():
                for name in names:
                    if name not in done:
                        rows.append(Row(name, f"failed: embedded cluster: {exc}", "—", "—", "—", "**FAILED**"))
        rows += guarded(["5. FSDP2 vs DDP memory per rank"], bench_fsdp_memory, ctx)
        rows += guarded(["6. Ray Train DDP vs torchrun DDP in-loop samples/s"], bench_train_throughput, ctx)
        rows += guarded(["7. `rtjob pull` vs s5cmd and `aws s3 cp` on SeaweedFS"], bench_pull, ctx)
        rows += guarded(["8. `rtjob runs -o json` over 10,000 ledger entries"], bench_ledger, ctx)
        rows += guarded(["9. `rtjob runs --storage` over 1,000 run records"], bench_records, ctx)
        rows += guarded(["10. embedded cluster cold start vs by hand"], bench_coldstart, ctx)
        rows += guarded(["11. `rtjob runs --storage` over 100,000 runs (run index)"], bench_index, ctx)
        rows += guarded(["12. the run-side companion"], bench_companion, ctx)
        rows += guarded(["13. `rtjob ui` runs page and log"], bench_ui, ctx)
        rows += guarded(["14. 8 `submit --no-wait` at once to a running cluster"], bench_parallel_submit, ctx)
        rows += guarded(["15. submit → first step vs one process"], bench_startup, ctx)
        rows += guarded(["16. the queue keeper and `rtjob queue`"], bench_queue, ctx)
        rows += guarded(["16e. six Ray Train jobs straight to Ray vs through a queue"], bench_queue_makespan, ctx)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # 1, 2, 3, 4a, ..., 10a whatever order they ran in (numbers compared as numbers: 10 after 9)
    rows.sort(key=lambda r: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", r.measurement)])
    meta["runtime"] = f"{time.monotonic() - began:.0f} s"
    text = render(rows, meta, ctx.notes)
    RESULTS.write_text(text)
    print(text)
    return 1 if any(r.met == "**FAILED**" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
