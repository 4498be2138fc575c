"""The team queue's own costs (issue 44, parts 1 and 2), measured with the queue's real code over folder storage.

    python benchmarks/queue_bench.py          # prints the rows as a Markdown table, then its notes
    from queue_bench import run_queue_bench   # benchmarks/run.py: rows for results.md

1. The keeper's hand-over: the real ``Keeper.run`` loop (rtjob/queue/keeper.py, its own 1 s poll, lease, fold,
   admission, state writes with If-Match) over a folder queue filled by the real ``client.enqueue``; the cluster it
   talks to is an in-process stand-in for Ray's Jobs API (``Stand``: submit records the time; a run "ends" when this
   benchmark says so), so what is timed is the keeper's part only, not Ray's. Each run declares the whole 1-CPU
   node, so the next one can be admitted only once the last ended. Figures: the end made visible → the next run
   submitted (what a user waits: the poll's wait plus the pass) and the keeper's pass seeing the end → the submit.
2. ``rtjob queue NAME -o json`` over 1,000 queued runs: 1,000 enqueue intents written by the real client, folded by
   one real keeper pass (nothing fits, so all stay queued, each with its reason), then the real command timed from
   process spawn, its JSON checked to hold 1,000 rows. There is no fair peer (Ray has no queue: `ray job list`
   lists what a cluster admitted, and needs one); for scale, a bare Python process that reads and parses the same
   queue-state.json (the floor of any Python CLI that reads it) is timed beside it.
Everything lives in a private temporary folder that is removed afterwards; nothing starts a cluster.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HANDOVERS = 8        # measured admissions after the first
QUEUED_RUNS = 1_000
REPEATS = 5
HANDOVER_GOAL_S = 1.0
LIST_GOAL_S = 1.0
QUEUED_SUBMIT_GOAL = 1.1
SHAPE_CPU = {"CPU": 1.0}


class Stand:
    """What the keeper needs of Ray (keeper.Cluster), in memory: one node of 1 CPU; a submitted run holds it until
    ``end`` is called. Records when each run was submitted and when a pass first saw it ended."""

    def __init__(self, cpus: float = 1.0) -> None:
        self.cpus = cpus
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.done: dict[str, float] = {}      # run -> when it was ended
        self.seen: dict[str, float] = {}      # run -> when a keeper pass first saw it ended
        self.submitted: dict[str, float] = {}  # run -> when the keeper submitted it
        self.order: list[str] = []
        self.held: set[str] = set()

    def end(self, run_id: str) -> float:
        with self.lock:
            self.running.discard(run_id)
            self.done[run_id] = time.monotonic()
            return self.done[run_id]

    def free_per_node(self) -> list[dict[str, float]]:
        with self.lock:
            return [{"CPU": self.cpus - len(self.running)}]

    def total_per_node(self) -> list[dict[str, float]]:
        return [{"CPU": self.cpus}]

    def grows(self) -> bool:
        return False  # a fixed cluster: nothing is asked of an autoscaler

    def ask_for(self, bundles: list[dict[str, float]]) -> None:
        raise AssertionError("a fixed cluster has no autoscaler to ask")

    def largest_per_node(self) -> tuple[list[dict[str, float]], str] | None:
        raise AssertionError("a fixed cluster does not grow")

    def hold_sealed(self, queued: list[Any], request_of: Any) -> None:
        for entry in queued:  # as the Ray keeper does: each queued run's request read once (none is sealed here)
            if entry.run_id not in self.held:
                self.held.add(entry.run_id)
                request_of(entry.intent)

    def job(self, run_id: str) -> dict[str, Any] | None:
        with self.lock:
            if run_id in self.done:
                return {"status": "SUCCEEDED"}
            return {"status": "RUNNING"} if run_id in self.running else None

    def submit(self, body: dict[str, Any]) -> bool:
        with self.lock:
            run = str(body["submission_id"])
            self.running.add(run)
            self.submitted[run] = time.monotonic()
            self.order.append(run)
            return True

    def restore_code(self, body: dict[str, Any], fetch: Any) -> list[str]:
        return []

    def placed(self, run_id: str, data: dict[str, Any], workers: int) -> str | None:
        return "driver"  # its driver holds its declared CPU at once (as an entrypoint_num_cpus run's does)

    def ended(self, run_id: str) -> bool:
        with self.lock:
            if run_id in self.done:
                self.seen.setdefault(run_id, time.monotonic())
                return True
            return False

    def stop(self, run_id: str) -> None:
        self.end(run_id)


def _request(run_id: str) -> dict[str, Any]:
    """A planned Jobs API body like the one `rtjob submit --queue` keeps (size matters for the listing)."""
    return {"entrypoint": "python count.py --lines 20 --interval 0.1", "submission_id": run_id,
            "runtime_env": {"working_dir": "gcs://_ray_pkg_5f1e2d3c4b5a6978.zip",
                            "env_vars": {"RTJOB_RUN_ID": run_id, "RTJOB_JOB": "count", "OMP_NUM_THREADS": "1"}},
            "metadata": {"rtjob.job": "count", "rtjob.attempt": "1"}, "entrypoint_num_cpus": 1}


def _fill(ref: Any, count: int, prefix: str) -> list[str]:
    from rtjob.queue.client import enqueue
    from rtjob.queue.format import Shape

    runs = [f"{prefix}-{n:05d}" for n in range(count)]
    for n, run in enumerate(runs):
        enqueue(ref, run, _request(run), Shape(entrypoint=dict(SHAPE_CPU)), user=("ann", "bob", "cy")[n % 3],
                job="count", priority=(n % 7) - 3)
    return runs


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not seen within {timeout:.0f} s")
        time.sleep(0.005)


def measure_handover(work: Path, handovers: int = HANDOVERS) -> tuple[list[float], list[float], float]:
    """(end → next submit, pass saw the end → next submit, the keeper's poll interval) over ``handovers``."""
    import inspect

    from rtjob.queue.admission import Limits
    from rtjob.queue.client import QueueRef
    from rtjob.queue.keeper import Keeper

    poll_s = float(inspect.signature(Keeper.run).parameters["poll_s"].default)  # what main() runs it with
    ref = QueueRef("benchq", str(work / "handover"))
    runs = _fill(ref, handovers + 1, "hand")
    stand = Stand()
    keeper = Keeper(ref.objects(), ref.name, stand, "rtjob-keeper-benchq-1", Limits(),
                    record=lambda *_: None)  # run records are the CLI's business, not this hand-over's
    thread = threading.Thread(target=keeper.run, kwargs={"poll_s": poll_s, "idle_exit_s": 0.5}, daemon=True)
    thread.start()
    waited, in_pass = [], []
    rng = random.Random(44)
    try:
        _wait(lambda: len(stand.order) >= 1, 30, "the first admission")
        for i in range(handovers):
            run = stand.order[i]
            time.sleep(rng.uniform(0.05, 0.05 + poll_s))  # end at a phase unrelated to the keeper's passes
            ended_at = stand.end(run)
            _wait(lambda i=i: len(stand.order) >= i + 2, 30, f"admission {i + 2}")
            nxt = stand.order[i + 1]
            waited.append(stand.submitted[nxt] - ended_at)
            in_pass.append(stand.submitted[nxt] - stand.seen[run])
        stand.end(stand.order[-1])
        thread.join(timeout=30)
    finally:
        for run in runs:
            stand.end(run)
    if len(set(stand.order)) != len(stand.order):
        raise RuntimeError(f"a run was submitted twice: {stand.order}")
    return waited, in_pass, poll_s


def _timed(cmd: list[str], env: dict[str, str], cwd: Path, timeout_s: float,
           check: Callable[[str], None] | None = None) -> float:
    """Wall seconds of one command, spawn → exit; a non-zero exit or a failed ``check`` of its stdout raises."""
    began = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[-4:])}` exited {done.returncode}: {done.stderr.strip()[-300:]}")
    if check is not None:
        check(done.stdout)
    return took


def measure_listing(work: Path, repeats: int = REPEATS) -> tuple[list[float], list[float], float, int]:
    """(`rtjob queue NAME -o json` wall times, bare-read wall times, the keeper pass's time, state bytes)."""
    from rtjob.queue.admission import Limits
    from rtjob.queue.client import QueueRef
    from rtjob.queue.format import STATE
    from rtjob.queue.keeper import Keeper

    storage, name = work / "storage", "bench"
    ref = QueueRef(name, str(storage))
    _fill(ref, QUEUED_RUNS, "qrun")
    keeper = Keeper(ref.objects(), name, Stand(cpus=0.0), "rtjob-keeper-bench-1", Limits(), record=lambda *_: None)
    start = time.monotonic()
    if not keeper.step():
        raise RuntimeError("the keeper pass lost its lease")
    pass_s = time.monotonic() - start
    state_file = Path(ref.folder) / STATE
    project = work / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(f'[tool.rtjob]\nstorage = "{storage}"\n\n[tool.rtjob.queues.{name}]\n')
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("RAY_", "RTJOB_"))}
    env.update(RTJOB_HOME=str(work / "home"), RTJOB_PROJECT=str(project))
    rtjob = [str(BIN / "rtjob")] if (BIN / "rtjob").exists() else [sys.executable, "-m", "rtjob.main"]
    listing = [*rtjob, "queue", name, "-o", "json"]
    bare = [sys.executable, "-c", f"import json; print(len(json.load(open({str(state_file)!r}))['entries']))"]

    def rows_ok(out: str) -> None:
        rows = json.loads(out)
        if len(rows) != QUEUED_RUNS or rows[0].get("position") != 1:
            raise RuntimeError(f"`rtjob queue -o json` gave {len(rows)} rows (first {rows[:1]}), not {QUEUED_RUNS}")

    def count_ok(out: str) -> None:
        if out.strip() != str(QUEUED_RUNS):
            raise RuntimeError(f"the bare read counted {out.strip()} entries")

    def timed(cmd: list[str], check: Callable[[str], None]) -> float:
        return _timed(cmd, env, project, 120, check)

    timed(listing, rows_ok)
    timed(bare, count_ok)  # warm-ups
    ours, floor = [], []
    for _ in range(repeats):  # interleaved, so drift hits both
        ours.append(timed(listing, rows_ok))
        floor.append(timed(bare, count_ok))
    return ours, floor, pass_s, state_file.stat().st_size


def measure_queued_submit(rtjob: list[str], env: dict[str, str], project: Path,
                          repeats: int = REPEATS) -> tuple[list[float], list[float]]:
    """(`submit --queue Q --no-wait` wall times, plain `submit --no-wait` wall times), spawn → exit, interleaved,
    to the running cluster ``env`` points at, from one project (folder storage, queue Q declared) for both sides.
    One warm-up each: the queue's first enqueue also starts its keeper on the cluster."""
    sleeper = next(iter(sorted((project / "jobs").glob("*sleep*.yaml"))), None)
    if sleeper is None:
        raise RuntimeError(f"no sleep job in {project / 'jobs'}")
    ours = project.parent / "queue-project"
    shutil.copytree(project, ours, dirs_exist_ok=True)
    storage = project.parent / "queue-storage"
    (ours / "pyproject.toml").write_text(f'[tool.rtjob]\nstorage = "{storage}"\n\n[tool.rtjob.queues.benchq]\n')
    env = {**env, "RTJOB_PROJECT": str(ours)}

    def timed(*extra: str) -> float:
        return _timed([*rtjob, "submit", sleeper.stem, "--no-wait", *extra], env, ours, 180)

    timed("--queue", "benchq")
    timed()  # warm-ups
    queued, plain = [], []
    for _ in range(repeats):
        queued.append(timed("--queue", "benchq"))
        plain.append(timed())
    return queued, plain


def queued_submit_rows(rtjob: list[str], env: dict[str, str], project: Path,
                       repeats: int = REPEATS) -> list[dict[str, str]]:
    try:
        queued, plain = measure_queued_submit(rtjob, env, project, repeats)
    except Exception as exc:  # noqa: BLE001 - a failed measurement is a row saying why
        return [{"measurement": "`submit --queue Q --no-wait` vs `submit --no-wait`", "rtjob": f"failed: {exc}",
                 "peer": "—", "ratio": "—", "goal": f"≤{QUEUED_SUBMIT_GOAL:g}×", "met": "**FAILED**"}]
    ratio = statistics.median(queued) / statistics.median(plain)
    return [{"measurement": f"`submit --queue Q --no-wait` vs `submit --no-wait`, spawn → exit (median of "
                            f"{repeats}; running embedded cluster, folder storage)",
             "rtjob": _spread(queued), "peer": f"{_spread(plain)} (rtjob's plain submit)",
             "ratio": f"{ratio:.2f}×", "goal": f"≤{QUEUED_SUBMIT_GOAL:g}×",
             "met": "yes" if ratio <= QUEUED_SUBMIT_GOAL else "**NO**"}]


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}–{max(values):.3f})"


def run_queue_bench(repeats: int = REPEATS, *, notes: list[str] | None = None) -> list[dict[str, str]]:
    """Rows (keys measurement, rtjob, peer, ratio, goal, met); each part that fails is a failed row, with why."""
    notes = notes if notes is not None else []
    work = Path(tempfile.mkdtemp(prefix="rtjob-queuebench-", dir="/tmp"))
    rows: list[dict[str, str]] = []
    try:
        try:
            waited, in_pass, poll_s = measure_handover(work)
            med = statistics.median(waited)
            rows.append({"measurement": f"queue keeper: a run's end → the next queued run submitted (median of "
                                        f"{len(waited)}; real keeper loop, folder storage, Ray stood in)",
                         "rtjob": _spread(waited), "peer": f"none (the keeper polls every {poll_s:g} s)",
                         "ratio": f"{med / poll_s:.2f}× the poll", "goal": f"≤{HANDOVER_GOAL_S:g} s",
                         "met": "yes" if med <= HANDOVER_GOAL_S else "**NO**"})
            rows.append({"measurement": "… of which the keeper's pass: the end seen → the next submitted",
                         "rtjob": _spread(in_pass), "peer": "—", "ratio": "—", "goal": "—", "met": "—"})
        except Exception as exc:  # noqa: BLE001 - a failed measurement is a row saying why
            rows.append({"measurement": "queue keeper: a run's end → the next queued run submitted",
                         "rtjob": f"failed: {exc}", "peer": "—", "ratio": "—", "goal": "≤1 s", "met": "**FAILED**"})
        try:
            ours, floor, pass_s, size = measure_listing(work, repeats)
            med = statistics.median(ours)
            rows.append({"measurement": f"`rtjob queue NAME -o json` over {QUEUED_RUNS:,} queued runs "
                                        f"(median of {repeats})",
                         "rtjob": _spread(ours), "peer": f"{_spread(floor)} (a bare Python read of the state; "
                                                         "no fair peer)",
                         "ratio": f"{med / statistics.median(floor):.1f}× the bare read",
                         "goal": f"≤{LIST_GOAL_S:g} s", "met": "yes" if med <= LIST_GOAL_S else "**NO**"})
            notes.append(f"queue listing: the keeper's pass folding {QUEUED_RUNS:,} enqueue intents took "
                         f"{pass_s:.2f} s; the state it wrote is {size / 1024:.0f} KiB")
        except Exception as exc:  # noqa: BLE001
            rows.append({"measurement": f"`rtjob queue NAME -o json` over {QUEUED_RUNS:,} queued runs",
                         "rtjob": f"failed: {exc}", "peer": "—", "ratio": "—", "goal": "≤1 s", "met": "**FAILED**"})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from table import run_alone

    sys.exit(run_alone(__doc__ or "", run_queue_bench))
