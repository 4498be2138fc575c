"""`rtjob ui` (issue 28): the runs page over 10,000 ledger entries and the first screen of a 40 MiB stored log,
timed against a real `rtjob ui` server on loopback (its own process, as a user runs it).

    python benchmarks/ui_bench.py          # prints the rows as a Markdown table (--latency: 13d too, with its
                                           # own embedded cluster)
    from ui_bench import run_ui_bench      # benchmarks/run.py: rows for results.md

Measurements (one warm-up each, then medians of the repeats; urllib on loopback, no browser):
  a. GET / (the runs page: the newest 50 of 10,000 ledger entries, filters and pager, rendered and redacted), the
     whole answer; goal ≤ 100 ms. The ledger is filled like benchmarks/ledger_bench.py's (realistic records).
  b. GET /runs/ID/log of a run whose stored log is 40 MiB in 10 parts of 4 MiB (as the run's companion writes
     them): time to the first byte of its last 1,000 lines; goal ≤ 200 ms. No peer: Ray's dashboard serves a
     job's log from the cluster only while the cluster lives.
A private RTJOB_HOME and storage folder, removed afterwards; the server is stopped by its pid.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

ENTRIES = 10_000
REPEATS = 7
PAGE_GOAL_S = 0.100
LOG_GOAL_S = 0.200
LOG_MIB = 40
PARTS = 10


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms ({min(values) * 1000:.0f}–{max(values) * 1000:.0f})"


def _get(port: int, path: str) -> tuple[float, float, int]:
    """(seconds to the first byte, seconds to the whole answer, its bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    begin = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    first = response.read(1)
    ttfb = time.perf_counter() - begin
    rest = response.read()
    whole = time.perf_counter() - begin
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {(first + rest)[:200]!r}")
    return ttfb, whole, len(first) + len(rest)


def _big_log_run(storage: Path) -> str:
    from support.ui_runs import append_log_part, write_run

    record = write_run(storage, "bench-log", "ddp-resnet", epochs=3, log_lines=["start"])
    line = "epoch 3 step 123456 loss 0.123456 lr 0.000100 throughput 1234.5 samples/s " + "x" * 50
    per_part = (LOG_MIB << 20) // PARTS // (len(line) + 1)
    for index in range(1, PARTS + 1):
        append_log_part(record, index, [f"{line} {index}:{n}" for n in range(per_part)])
    return record.id


def _archived_log_run(storage: Path) -> str:
    """A run whose log was archived whole (logs/driver.log, 40 MiB: an ended run of a client-carried run)."""
    from support.ui_runs import write_run

    import rtjob_contract as contract

    record = write_run(storage, "bench-archived", "ddp-resnet", epochs=3, log_lines=["start"])
    run_dir = Path(record.storage_uri or "")
    shutil.rmtree(run_dir / contract.RUN_LOGS_DIR / record.id)
    line = "epoch 3 step 123456 loss 0.123456 lr 0.000100 throughput 1234.5 samples/s " + "x" * 50 + "\n"
    with open(run_dir / contract.RUN_LOGS_DIR / contract.DRIVER_LOG_FILE, "w") as out:
        for _ in range((LOG_MIB << 20) // len(line)):
            out.write(line)
    return record.id


def run_ui_bench(*, repeats: int = REPEATS, notes: list[str] | None = None) -> list[dict[str, str]]:
    from benchmarks.ledger_bench import fill

    notes = notes if notes is not None else []
    work = Path(tempfile.mkdtemp(prefix="rtjob-uibench-", dir="/tmp"))
    proc = None
    try:
        home = work / "home"
        storage = work / "storage"
        fill(home / "ledger.sqlite3", ENTRIES)
        env = {**os.environ, "RTJOB_HOME": str(home), "XDG_CONFIG_HOME": str(work / "xdg")}
        prior = os.environ.get("RTJOB_HOME")
        os.environ["RTJOB_HOME"] = str(home)
        try:
            run_id = _big_log_run(storage)
            archived_id = _archived_log_run(storage)
        finally:
            if prior is None:
                os.environ.pop("RTJOB_HOME", None)
            else:
                os.environ["RTJOB_HOME"] = prior
        log = work / "ui.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "rtjob.main", "ui", "--port", "0", "--storage",
                                     str(storage)], env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not (match := re.search(r"127\.0\.0\.1:(\d+)/", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rtjob ui did not start: {log.read_text()[-300:]}")
            time.sleep(0.05)
        port = int(match.group(1))
        page = [_get(port, "/?source=ledger") for _ in range(repeats + 1)][1:]
        searched = [_get(port, "/?source=ledger&q=ddp-resnet-2&sort=cost_usd") for _ in range(repeats + 1)][1:]
        tail = [_get(port, f"/runs/{run_id}/log") for _ in range(repeats + 1)][1:]
        archived = [_get(port, f"/runs/{archived_id}/log") for _ in range(repeats + 1)][1:]
        notes.append(f"13: the runs page answer is {page[0][2] / 1000:.0f} kB (50 rows of {ENTRIES:,}); the log "
                     f"tail answer {tail[0][2] / 1000:.0f} kB (1,000 lines of a {LOG_MIB} MiB log in {PARTS} parts)")
        whole_page = [w for _, w, _ in page]
        first_log = [t for t, _, _ in tail]
        return [
            {"measurement": f"13a. `rtjob ui` runs page over {ENTRIES:,} ledger entries, whole answer (median of "
                            f"{repeats})", "rtjob": _spread(whole_page), "peer": "— (no peer keeps this history)",
             "ratio": "—", "goal": f"≤ {PAGE_GOAL_S * 1000:.0f} ms",
             "met": "yes" if statistics.median(whole_page) <= PAGE_GOAL_S else "no"},
            {"measurement": "13a2. … searched and sorted by cost (every entry's summary read, matched, sorted)",
             "rtjob": _spread([w for _, w, _ in searched]), "peer": "—", "ratio": "—",
             "goal": f"≤ {PAGE_GOAL_S * 1000:.0f} ms",
             "met": "yes" if statistics.median([w for _, w, _ in searched]) <= PAGE_GOAL_S else "no"},
            {"measurement": f"13b. `rtjob ui` a {LOG_MIB} MiB stored log's first screen (last 1,000 lines), time to "
                            f"first byte (median of {repeats})", "rtjob": _spread(first_log),
             "peer": "— (Ray's dashboard has no log once the cluster is gone)", "ratio": "—",
             "goal": f"≤ {LOG_GOAL_S * 1000:.0f} ms",
             "met": "yes" if statistics.median(first_log) <= LOG_GOAL_S else "no"},
            {"measurement": f"13c. … the same {LOG_MIB} MiB archived whole as logs/driver.log (read through to "
                            f"its last lines, never held whole)", "rtjob": _spread([t for t, _, _ in archived]),
             "peer": "—", "ratio": "—", "goal": f"≤ {LOG_GOAL_S * 1000:.0f} ms",
             "met": "yes" if statistics.median([t for t, _, _ in archived]) <= LOG_GOAL_S else "no"},
        ]
    finally:
        if proc is not None:
            import run  # benchmarks/run.py: this folder is on sys.path (as a script, or under run.py)

            run.stop(proc)
        shutil.rmtree(work, ignore_errors=True)


UI_LINES = 40
UI_GAP_S = 0.25
_OBSERVE = """
window.arrivals = {};
const pre = document.getElementById('log');
const scan = () => {
  const now = Date.now() / 1000;
  for (const m of pre.textContent.matchAll(/BENCHLINE (\\d+) (\\d+\\.\\d+)/g)) {
    if (!(m[1] in window.arrivals)) window.arrivals[m[1]] = [now - parseFloat(m[2]), parseFloat(m[2])];
  }
};
new MutationObserver(scan).observe(pre, {childList: true, characterData: true, subtree: true});
scan();
"""


def latency_rows(b: Any, c: Any) -> list[dict[str, str]]:
    """13d: a printed line → the open run page (headless Chromium, `rtjob ui` on loopback; the line's arrival in the
    page's log, seen by a MutationObserver) beside `ray job submit`'s print → terminal, for the same job
    (``b``: run.py's module, ``c`` its Context with the embedded cluster up). Only lines printed after the page was
    open count on rtjob's side (the live path: the companion's log parts, then server-sent events)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from loglat_bench import ray_submit_watched
    from support.browser import chromium, until

    project = Path(c.env["RTJOB_PROJECT"])
    entry = f"python emitter.py {UI_LINES} {UI_GAP_S}"
    (project / "jobs" / "bench-ui-logs.yaml").write_text(f"name: bench-ui-logs\nstrategy: custom\nentrypoint: {entry}\n")
    rt_id = f"bench-ui-{os.urandom(2).hex()}"
    ray_id = f"bench-ui-ray-{os.urandom(2).hex()}"
    log = c.work / "ui-latency.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([b.RTJOB, "ui", "--port", "0"], env=c.env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"127\.0\.0\.1:(\d+)/", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rtjob ui did not start: {log.read_text()[-300:]}")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{match.group(1)}/runs/{rt_id}"
        with chromium() as browser:
            b.run_checked([b.RTJOB, "submit", "bench-ui-logs", "--submission-id", rt_id, "--no-wait"], c.env,
                          timeout=120)
            browser.get(url)
            opened = time.time()
            browser.execute_script(_OBSERVE)
            until(lambda: len(browser.execute_script("return window.arrivals")) >= UI_LINES, timeout=120,
                  what="every line on the page")
            arrivals = browser.execute_script("return window.arrivals")
        c.finished_jobs.append(rt_id)
    finally:
        b.stop(proc)
    live = [lat for lat, printed in arrivals.values() if printed > opened]
    peer = ray_submit_watched(b, c, ray_id, entry)
    if not live or not peer.terminal:
        raise RuntimeError(f"no latency seen: {len(live)} live lines on the page, {len(peer.terminal)} on ray's terminal")
    mine, theirs = statistics.median(live), statistics.median(peer.terminal.values())
    c.notes.append(f"13d: {len(live)} of {UI_LINES} lines printed after the page opened ({UI_GAP_S} s apart); the "
                   "page gets a line when the run's companion uploads the log part that holds it (~0.5 s after new output, "
                   "at most one a second) and the server's 1 s poll of the run's log folder sees it")
    return [{"measurement": f"13d. `rtjob ui` a printed line → the open run page, median ({UI_LINES} lines "
                            f"{UI_GAP_S} s apart; headless Chromium)", "rtjob": f"{mine:.3f} s",
             "peer": f"`ray job submit` print → terminal {theirs:.3f} s", "ratio": f"{mine / theirs:.2f}× (ui/ray)",
             "goal": "≤1.5 s", "met": "yes" if mine <= 1.5 else "**no**"}]


def main() -> int:
    from benchmarks.table import print_table

    notes: list[str] = []
    rows = run_ui_bench(notes=notes)
    if "--latency" in sys.argv:  # a private embedded cluster (run.py's), stopped at the end
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import run as bench

        work = Path(tempfile.mkdtemp(prefix="rtjob-uilat-", dir="/tmp"))
        ctx = bench.Context(work=work, env=bench.base_env(work))
        bench.make_project(work / "project")
        with bench.embedded_cluster(ctx):
            rows += latency_rows(bench, ctx)
        notes += ctx.notes
    print_table(rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
