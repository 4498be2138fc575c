"""Cold start of the embedded cluster (issue 13, part 4): rtjob against the same steps done by hand with Ray's CLI.

    python benchmarks/coldstart_bench.py          # prints the rows as a Markdown table
    from coldstart_bench import run_coldstart_bench  # benchmarks/run.py: rows for results.md

Measurements (each side timed from process spawn; the sides interleaved, medians of the repeats):
  a. `rtjob local up --nodes 2` against `ray start --head …` then `ray start --address …` (one node each,
     1 CPU, token auth, their own temp dirs, the same ports flags rtjob gives: several nodes on one machine
     need their own agent ports);
  b. submit → the job's first log line on the terminal, with a tiny job (tests/support/jobs/count.yaml:
     `line 1 of 3` is its first line): cold (`rtjob submit … --nodes 2` with no cluster, so rtjob starts
     one, against `ray start --head` + `ray start --address` + `ray job submit`) and warm (the cluster is up:
     `rtjob submit` against `ray job submit`).
Each CLI's stdout is a pseudo-terminal (as at a prompt: line-buffered). Every process either side starts
carries a marker in its environment (Ray's daemons inherit it) and is ended by pid afterwards, the rtjob side
after `rtjob local down` (which must leave nothing: a leftover is reported in the notes); nothing runs `ray stop`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ptyread import read_pty

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.processes import end_pids, free_ports, is_zombie, marked_pids  # noqa: E402  (the tests' pid helpers)

BIN = Path(sys.executable).parent
JOB = "tests/support/jobs/count.yaml"
JOB_LINES = 3
FIRST_LINE = f"line 1 of {JOB_LINES}".encode()
BY_HAND_ENTRYPOINT = ["python", "count.py", "--lines", str(JOB_LINES), "--interval", "0.1"]
REPEATS_UP, REPEATS_COLD, REPEATS_WARM = 3, 2, 3
OBJECT_STORE_BYTES = str(512 * 1024**2)  # what rtjob gives each node
MARK = "RTJOB_COLDSTART_BENCH"  # the environment marker of every process this benchmark starts
GOAL = 1.0  # rtjob / by hand
FOREIGN = ("RAY_", "RTJOB_")  # settings that would point either side at another cluster or project


def rtjob_command() -> list[str]:
    """The command to run rtjob with: the ``rtjob`` script beside this interpreter, else ``python -m rtjob.main``."""
    return [str(BIN / "rtjob")] if (BIN / "rtjob").exists() else [sys.executable, "-m", "rtjob.main"]


class BenchError(Exception):
    """A measurement could not be taken; the message says why."""


class Side:
    """One side's private world: environment (with its marker), RTJOB_HOME or token file, temp dirs."""

    def __init__(self, work: Path, name: str, rtjob: list[str]) -> None:
        self.work, self.name, self.rtjob = work / name, name, rtjob
        self.work.mkdir()
        self.mark = f"{name}-{secrets.token_hex(4)}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN) and k != "PYTHONUNBUFFERED"}
        env.update({MARK: self.mark, "RTJOB_HOME": str(self.work / "home"), "RAY_USAGE_STATS_ENABLED": "0",
                    "PATH": os.pathsep.join([str(BIN), env.get("PATH", "")])})
        token = self.work / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.env = env
        self.ray_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        self.dashboard = ""
        self.temps: list[str] = []  # the by-hand nodes' temp dirs

    # --- by hand ---------------------------------------------------------------------------------
    def ray_start_commands(self) -> list[list[str]]:
        """`ray start --head …` and `ray start --address …`, each node its own temp dir and agent ports."""
        temp = tempfile.mkdtemp(prefix="rcs-", dir="/tmp")  # short: Ray's socket paths are capped
        self.temps.append(temp)
        gcs, dash, client, *agents = free_ports(3 + 8)
        self.dashboard = f"http://127.0.0.1:{dash}"
        ray = str(BIN / "ray")

        def node(ports: list[int]) -> list[str]:
            return ["--num-cpus", "1", "--num-gpus", "0", "--object-store-memory", OBJECT_STORE_BYTES,
                    "--disable-usage-stats", "--dashboard-agent-listen-port", str(ports[0]),
                    "--dashboard-agent-grpc-port", str(ports[1]), "--runtime-env-agent-port", str(ports[2]),
                    "--metrics-export-port", str(ports[3])]

        os.makedirs(f"{temp}/n2")
        return [
            [ray, "start", "--head", "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port",
             str(dash), "--ray-client-server-port", str(client), "--temp-dir", temp, *node(agents[:4])],
            [ray, "start", "--address", f"127.0.0.1:{gcs}", "--temp-dir", f"{temp}/n2", *node(agents[4:])],
        ]

    def job_submit_command(self) -> list[str]:
        return [str(BIN / "ray"), "job", "submit", "--address", self.dashboard, "--working-dir",
                str(ROOT / "tests/support/jobs/wd"), "--", *BY_HAND_ENTRYPOINT]

    # --- rtjob ----------------------------------------------------------------------------------
    def rtjob_submit_command(self) -> list[str]:
        return [*self.rtjob, "submit", JOB, "--nodes", "2", "--set", f"args.lines={JOB_LINES}"]

    # --- either -----------------------------------------------------------------------------------
    def stop(self, notes: list[str]) -> None:
        """The rtjob side: `rtjob local down` first (what a user runs; it must leave nothing), then either
        side: end by pid whatever carries this side's marker, and remove its temp dirs."""
        if (self.work / "home" / "local" / "cluster.json").exists():
            down = subprocess.run([*self.rtjob, "local", "down"], env=self.env, cwd=ROOT, capture_output=True,
                                  text=True, timeout=180)
            if down.returncode != 0:
                notes.append(f"coldstart: `rtjob local down` exited {down.returncode}: {down.stderr.strip()[-200:]}")
            left = [p for p in marked_pids(MARK, self.mark) if not is_zombie(p)]
            if left:
                notes.append(f"coldstart: `rtjob local down` left {len(left)} process(es) running; ended by pid")
        end_pids(marked_pids(MARK, self.mark))
        for temp in self.temps:
            shutil.rmtree(temp, ignore_errors=True)


def _run(cmd: list[str], env: dict[str, str], timeout: float = 240) -> None:
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])[:240]
        raise BenchError(f"`{Path(cmd[0]).name} {' '.join(cmd[1:3])}` exited {proc.returncode}: {tail}")


def _run_all(cmds: list[list[str]], env: dict[str, str]) -> None:
    for cmd in cmds:
        _run(cmd, env)


def _until_first_line(cmd: list[str], env: dict[str, str], timeout: float = 300) -> float:
    """Run ``cmd`` on a pseudo-terminal; the monotonic time its output first holds the job's first line.
    The command then runs to its end (the tiny job ends by itself), so the next run starts on a quiet cluster."""
    seen: float | None = None
    text = b""

    def on_chunk(chunk: bytes) -> None:
        nonlocal seen, text
        text += chunk
        if seen is None and FIRST_LINE in text:
            seen = time.monotonic()

    code, _ = read_pty(cmd, env, on_chunk, timeout, cwd=ROOT, wait_s=60)
    if seen is None:
        tail = " | ".join(text.decode(errors="replace").strip().splitlines()[-2:])[:240]
        raise BenchError(f"`{Path(cmd[0]).name} {' '.join(cmd[1:3])}` (exit {code}) never printed "
                         f"{FIRST_LINE.decode()!r}: {tail}")
    return seen


def _timed(steps: Callable[[], float | None]) -> float:
    start = time.monotonic()
    end = steps()
    return (end if end is not None else time.monotonic()) - start


def _row(measurement: str, rtjob: list[float], peer: list[float], peer_what: str, goal: bool) -> dict[str, str]:
    rt, by_hand = statistics.median(rtjob), statistics.median(peer)
    ratio = rt / by_hand
    return {
        "measurement": f"{measurement} (median of {len(rtjob)})",
        "rtjob": f"{rt:.2f} s ({min(rtjob):.2f}–{max(rtjob):.2f})",
        "peer": f"{by_hand:.2f} s ({min(peer):.2f}–{max(peer):.2f}) {peer_what}",
        "ratio": f"{ratio:.2f}× (rtjob/by hand)",
        "goal": f"≤{GOAL:.1f}×" if goal else "—",
        "met": ("yes" if ratio <= GOAL else "no") if goal else "—",
    }


def run_coldstart_bench(rtjob: list[str] | None = None, *, notes: list[str] | None = None,
                        repeats: tuple[int, int, int] = (REPEATS_UP, REPEATS_COLD, REPEATS_WARM)) -> list[dict[str, str]]:
    """Rows (keys measurement, rtjob, peer, ratio, goal, met). ``rtjob`` is the command to run rtjob with
    (default: the ``rtjob`` script beside this interpreter, else ``python -m rtjob.main``)."""
    rtjob = rtjob or rtjob_command()
    notes = notes if notes is not None else []
    n_up, n_cold, n_warm = repeats
    work = Path(tempfile.mkdtemp(prefix="rtjob-coldbench-", dir="/tmp"))
    sides: list[Side] = []

    def side(name: str) -> Side:
        sides.append(Side(work, f"{name}{len(sides)}", rtjob))
        return sides[-1]

    def rtjob_up() -> float:
        s = side("rt")
        try:
            return _timed(lambda: _run_all([[*rtjob, "local", "up", "--nodes", "2"]], s.env))
        finally:
            s.stop(notes)

    def by_hand_up() -> float:
        s = side("rh")
        head, worker = s.ray_start_commands()
        try:
            return _timed(lambda: _run_all([head, worker], s.ray_env))
        finally:
            s.stop(notes)

    def rtjob_cold() -> float:
        s = side("rt")
        try:
            return _timed(lambda: _until_first_line(s.rtjob_submit_command(), s.env))
        finally:
            s.stop(notes)

    def by_hand_cold() -> float:
        s = side("rh")
        head, worker = s.ray_start_commands()

        def steps() -> float:
            _run(head, s.ray_env)
            _run(worker, s.ray_env)
            return _until_first_line(s.job_submit_command(), s.ray_env)

        try:
            return _timed(steps)
        finally:
            s.stop(notes)

    def interleave(n: int, first: Callable[[], float], second: Callable[[], float]) -> tuple[list[float], list[float]]:
        a: list[float] = []
        b: list[float] = []
        for _ in range(n):
            a.append(first())
            b.append(second())
        return a, b

    try:
        up_rt, up_hand = interleave(n_up, rtjob_up, by_hand_up)
        cold_rt, cold_hand = interleave(n_cold, rtjob_cold, by_hand_cold)
        warm_rt_side, warm_hand_side = side("rt"), side("rh")
        _run([*rtjob, "local", "up", "--nodes", "2"], warm_rt_side.env)
        for cmd in warm_hand_side.ray_start_commands():
            _run(cmd, warm_hand_side.ray_env)
        warm_rt, warm_hand = interleave(
            n_warm + 1,  # the first of each is a warm-up (the working dir's first upload, page cache)
            lambda: _timed(lambda: _until_first_line(warm_rt_side.rtjob_submit_command(), warm_rt_side.env)),
            lambda: _timed(lambda: _until_first_line(warm_hand_side.job_submit_command(), warm_hand_side.ray_env)),
        )
    finally:
        for s in sides:
            s.stop(notes)
        shutil.rmtree(work, ignore_errors=True)
    notes.append("coldstart: by hand = `ray start --head` + `ray start --address` (1 CPU each, token auth "
                 "via RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH, own temp dirs and agent ports) + `ray job submit "
                 "--working-dir`; the job is tests/support/jobs/count.yaml (3 lines), first line `line 1 of 3`")
    return [
        _row("`rtjob local up --nodes 2` vs `ray start --head` + `ray start --address`", up_rt, up_hand,
             "by hand", True),
        _row("submit → first log line, cold (no cluster: rtjob starts 2 nodes)", cold_rt, cold_hand,
             "`ray start` ×2 + `ray job submit`", True),
        _row("submit → first log line, warm (2-node cluster up)", warm_rt[1:], warm_hand[1:],
             "`ray job submit`", True),
    ]


def main() -> int:
    lines: list[str] = []
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    table = run_coldstart_bench(notes=lines)
    print("| measurement | rtjob | peer | ratio | goal | met? |\n|---|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row.values()) + " |")
    print("\n" + "\n".join(f"- {line}" for line in [f"load at start: {load}", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
