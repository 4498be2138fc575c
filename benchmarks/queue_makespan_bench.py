"""Issue 44's makespan: six 2-worker Ray Train jobs on a 2-node cluster, straight to Ray versus through a queue.

The jobs: `ddp-resnet --nodes 2` (Ray Train DDP, 2 workers × 1 CPU, its local profile cut to 1 epoch of a small
synthetic set) on the embedded 2-node cluster (1 CPU per node: one run fits at a time, as a full gang on a busy
shared cluster). Straight: six `submit --no-wait` at once to Ray; each Ray Train controller then waits for its
placement group (RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S, 60 s) and retries. Queued: six `submit --queue Q
--no-wait`; the keeper admits the next when the last one's end has freed the cluster. Each side is capped at 15
minutes and runs on a fresh cluster. Measured from Ray's own times: the makespan (the first submit → the last
run's end), the runs that did not end SUCCEEDED within the cap, and Ray Train's controller retries (its
"worker group startup timed out" lines in the drivers' logs).

    python benchmarks/queue_makespan_bench.py     # about 15 minutes on a 2-core machine
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.ray_jobs import JobsAPI  # noqa: E402  (the embedded cluster's Jobs API, read directly)

BIN = Path(sys.executable).parent
RTJOB = [str(BIN / "rtjob")] if (BIN / "rtjob").exists() else [sys.executable, "-m", "rtjob.main"]
RUNS = 6
CAP_S = 15 * 60
QUEUE = "mk"
ARGS = ["--nodes", "2", "--set", "args.epochs=1", "--set", "args.train_size=512",
        "--set", "args.val_size=128"]
TIMEOUT_LINE = "The worker group startup timed out"
GOAL = 1.0


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RTJOB_"))}
    (work / "xdg" / "rtjob").mkdir(parents=True)
    (work / "xdg" / "rtjob" / "config.toml").write_text(f'current = "bench"\n[contexts.bench.queues.{QUEUE}]\n')
    env.update(RTJOB_HOME=str(work / "home"), XDG_CONFIG_HOME=str(work / "xdg"), PYTHONUNBUFFERED="1")
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run([*RTJOB, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"`rtjob {' '.join(args[:3])}` exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def _stop(api: JobsAPI, run_id: str) -> None:
    requests.post(f"{api.address}/api/jobs/{run_id}/stop", headers={"Authorization": f"Bearer {api.token}"},
                  timeout=30)


def _timeouts(api: JobsAPI, run_id: str) -> int:
    """Ray Train's worker-group timeouts in the run's driver log (0 for a run Ray never had: never admitted)."""
    try:
        return api.logs(run_id).count(TIMEOUT_LINE)
    except requests.HTTPError:
        return 0


def one_side(queued: bool) -> dict[str, Any]:
    """Six runs on a fresh 2-node embedded cluster; what Ray says of them once all ended or the cap passed."""
    work = Path(tempfile.mkdtemp(prefix="rtjob-makespan-"))
    env = _env(work)
    try:
        _cli(env, "local", "up", "--nodes", "2", timeout=300)
        cluster = JobsAPI(env)
        ids = [f"mk-{'q' if queued else 'r'}-{i}-{os.urandom(2).hex()}" for i in range(RUNS)]
        began = time.time()
        for run_id in ids:  # one after another, each returns once its run is sent (or queued)
            _cli(env, "submit", "ddp-resnet", *ARGS, *(["--queue", QUEUE] if queued else []),
                 "--submission-id", run_id, "--no-wait")
        deadline = began + CAP_S
        ended: dict[str, dict[str, Any]] = {}
        while time.time() < deadline and len(ended) < RUNS:
            for run_id in ids:
                data = cluster.job(run_id) if run_id not in ended else None
                if data and data.get("status") in ("SUCCEEDED", "FAILED", "STOPPED"):
                    ended[run_id] = data
            time.sleep(2)
        for run_id in set(ids) - set(ended):
            _stop(cluster, run_id)
        ends = [float(d.get("end_time") or 0) / 1000 for d in ended.values()]
        retries = sum(_timeouts(cluster, run_id) for run_id in ids)
        return {"makespan_s": (max(ends) - began) if len(ended) == RUNS else None,
                "succeeded": sum(1 for d in ended.values() if d.get("status") == "SUCCEEDED"),
                "not_succeeded": RUNS - sum(1 for d in ended.values() if d.get("status") == "SUCCEEDED"),
                "retries": retries}
    finally:
        subprocess.run([*RTJOB, "local", "down"], env=env, cwd=ROOT, capture_output=True, timeout=300)
        shutil.rmtree(work, ignore_errors=True)


def makespan_rows() -> list[dict[str, str]]:
    ray, queue = one_side(queued=False), one_side(queued=True)

    def span(side: dict[str, Any]) -> str:
        return f"{side['makespan_s']:.0f} s" if side["makespan_s"] is not None else f"over the {CAP_S // 60}-min cap"

    ratio = (f"{queue['makespan_s'] / ray['makespan_s']:.2f}×" if ray["makespan_s"] and queue["makespan_s"]
             else "—")
    met = ratio != "—" and queue["makespan_s"] <= GOAL * ray["makespan_s"] and queue["not_succeeded"] == 0
    return [
        {"measurement": f"16e. {RUNS} × `ddp-resnet --nodes 2` (2 workers) on a 2-node embedded cluster: makespan, "
                        "the first submit → the last end", "rtjob": f"through a queue {span(queue)}",
         "peer": f"straight to Ray {span(ray)}", "ratio": ratio, "goal": f"≤{GOAL:g}×",
         "met": "yes" if met else "**no**"},
        {"measurement": "16f. … runs not SUCCEEDED within the cap; Ray Train controller retries (worker group "
                        "not started in time)", "rtjob": f"{queue['not_succeeded']}; {queue['retries']}",
         "peer": f"{ray['not_succeeded']}; {ray['retries']}", "ratio": "—", "goal": "0 runs lost",
         "met": "yes" if queue["not_succeeded"] == 0 else "**no**"},
    ]


if __name__ == "__main__":
    for row in makespan_rows():
        print(" | ".join(row.values()))
