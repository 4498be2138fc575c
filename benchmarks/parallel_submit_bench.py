"""Submits at once to a running embedded cluster (the start-up issue, part 4): 8 `rtjob submit --no-wait`
started together against one alone, on the same running cluster, in one run.

    python benchmarks/parallel_submit_bench.py          # prints the rows as a Markdown table
    from parallel_submit_bench import run_parallel_submit_bench  # benchmarks/run.py: rows for results.md

Goal (the issue's): the slowest of the 8 ≤ max(2.5 × one submit's wall time, 8 × one submit's CPU time /
the machine's cores): past that bound the submits wait on one another, not on the CPU they need. One submit's
CPU time is its process's user + system time (getrusage of the children). The bound counts the submits' CPU
only, so a second row gives the machine's whole CPU in the window (/proc/stat), the submits' and the rest's. The private cluster and every process
it started are stopped as coldstart_bench.py's Side stops its own (`rtjob local down`, then by pid).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from coldstart_bench import JOB, ROOT, Side, rtjob_command

CONCURRENT = 8
REPEATS_ONE = 3


def _submit(rtjob: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([*rtjob, "submit", JOB, "--nodes", "2", "--no-wait", "--submission-id",
                             f"par-{uuid.uuid4().hex[:8]}", "--set", "args.lines=1", "--set", "args.interval=0"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> None:
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"`rtjob submit --no-wait` exited {proc.returncode}: {(err or out).strip()[-300:]}")


def _one(rtjob: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one submit on its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    _finish(_submit(rtjob, env))
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _machine_busy_s() -> float:
    """CPU seconds every process on this machine has spent so far (/proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _together(rtjob: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s from the first spawn to the slowest of CONCURRENT submits' exit, the submits' CPU s, the
    machine's CPU s in that window): what the submits did not spend is Ray's (its dashboard, job agent and
    the JobSupervisor actors it starts), the jobs' own drivers, and anything else running here."""
    before, busy = resource.getrusage(resource.RUSAGE_CHILDREN), _machine_busy_s()
    start = time.monotonic()
    procs = [_submit(rtjob, env) for _ in range(CONCURRENT)]
    for proc in procs:
        _finish(proc)
    wall, busy = time.monotonic() - start, _machine_busy_s() - busy
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), busy


def run_parallel_submit_bench(rtjob: list[str] | None = None, *, notes: list[str] | None = None) -> list[dict[str, str]]:
    """Rows (keys measurement, rtjob, peer, ratio, goal, met)."""
    rtjob = rtjob or rtjob_command()
    notes = notes if notes is not None else []
    side = Side(Path(tempfile.mkdtemp(prefix="rtjob-parbench-", dir="/tmp")), "par", rtjob)
    try:
        subprocess.run([*rtjob, "local", "up", "--nodes", "2"], env=side.env, cwd=ROOT, check=True,
                       capture_output=True, timeout=300)
        _one(rtjob, side.env)  # warm-up: the working dir's package is uploaded once
        ones = [_one(rtjob, side.env) for _ in range(REPEATS_ONE)]
        slowest, clients_cpu, machine_cpu = _together(rtjob, side.env)
    finally:
        side.stop(notes)
    wall = statistics.median(w for w, _ in ones)
    cpu = statistics.median(c for _, c in ones)
    cores = os.cpu_count() or 1
    bound = max(2.5 * wall, CONCURRENT * cpu / cores)
    return [{
        "measurement": f"{CONCURRENT} `submit --no-wait` at once to a running cluster: the slowest, against one "
                       f"alone (median of {REPEATS_ONE}; CPU {cpu:.2f} s, {cores} cores)",
        "rtjob": f"{slowest:.2f} s",
        "peer": f"{wall:.2f} s (one alone)",
        "ratio": f"{slowest / wall:.2f}× (the slowest/one)",
        "goal": f"≤{bound:.2f} s = max(2.5 × one, {CONCURRENT} × CPU / cores)",
        "met": "yes" if slowest <= bound else "no",
    }, {
        # Where the time past the bound goes: the CPU the machine spent in the window, split into the
        # submits' own and the rest. On a saturated machine the slowest cannot end before all of it is done.
        "measurement": f"… the machine's CPU in those {slowest:.2f} s: the {CONCURRENT} submits' own, and the "
                       f"rest (Ray's dashboard, job agent and JobSupervisor actors, the jobs' drivers)",
        "rtjob": f"{clients_cpu:.2f} s (the submits)",
        "peer": f"{machine_cpu - clients_cpu:.2f} s (the rest)",
        "ratio": f"{machine_cpu / (cores * slowest):.0%} of {cores} cores busy",
        "goal": f"— (a floor for the slowest: all of it / {cores} cores = {machine_cpu / cores:.2f} s)",
        "met": "—",
    }]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for row in run_parallel_submit_bench():
        print("| " + " | ".join(row.values()) + " |")
