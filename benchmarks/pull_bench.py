"""`rtjob pull` against `aws s3 cp --recursive`, on a checkpoint tree served by a local S3 server (moto).

    python benchmarks/pull_bench.py            # prints the rows as a Markdown table
    from pull_bench import run_pull_bench      # benchmarks/run.py: rows for results.md

Measurements (rtjob and the peer interleaved, one warm-up each, medians of the repeats, same machine):
  P1. first pull of the whole tree (a few hundred small files + a few large ones) into an empty folder:
      `rtjob pull s3://… --checkpoint all` vs `aws s3 cp --recursive s3://… DIR --only-show-errors`
      (goal: rtjob ≥1.5× faster);
  P2. the same pull again over the unchanged tree, as a fraction of P1's rtjob time (goal ≤5%); for
      reference, the peer's own re-sync is `aws s3 sync` (size + mtime comparison).
Both are whole commands as a user runs them (process start-up included) and both trees are checked to be
byte-identical to what was uploaded. The S3 server runs as its own process. If the AWS CLI is not
installed, the peer is a boto3 script that calls `download_file` for each key in turn (stated in the row).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.s3_server import process_server  # noqa: E402  (the tests' moto server, as its own process)

VENV_BIN = Path(sys.executable).parent
RTJOB = [sys.executable, "-m", "rtjob.main"]
AWS = VENV_BIN / "aws"
BUCKET = "bench-runs"
PREFIX = "runs/ddp-resnet/bench-run"
MiB = 1024 * 1024

# Peer when the AWS CLI is missing: boto3's own single-threaded download loop.
BOTO3_LOOP = """
import os, sys, boto3
bucket, prefix, dest = sys.argv[1:4]
s3 = boto3.client("s3")
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
    for obj in page.get("Contents", []):
        rel = obj["Key"][len(prefix) + 1:]
        if not rel or rel.endswith("/"):
            continue
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        s3.download_file(bucket, obj["Key"], target)
"""


def make_tree(small_files: int, large_files: int, large_mb: int) -> dict[str, bytes]:
    """A checkpoint tree like a long run's: many small shards/JSON files per epoch, a few big model files."""
    tree: dict[str, bytes] = {}
    epochs = 5
    for i in range(small_files):
        epoch = i % epochs + 1
        size = 1024 + (i * 7919) % (96 * 1024)  # 1–97 KiB, deterministic spread
        tree[f"checkpoint_epoch_{epoch:04d}/shards/part_{i:05d}.bin"] = os.urandom(size)
    for j in range(large_files):
        tree[f"checkpoint_epoch_{epochs:04d}/model_{j}.pt"] = os.urandom(large_mb * MiB)
    tree[f"checkpoint_epoch_{epochs:04d}/metrics.json"] = json.dumps([{"epoch": e, "val_loss": 1 / e}
                                                                      for e in range(1, epochs + 1)]).encode()
    return tree


def _digest(tree: dict[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in tree.items()}


def _local_digest(root: Path) -> dict[str, str]:
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and path.name != ".rtjob-pull.jsonl" and path.relative_to(root).as_posix() != "metrics.json":
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _timed(cmd: list[str], env: dict[str, str], inside: list[float] | None = None) -> float:
    """Wall time of a whole command; ``inside`` gets rtjob's own JSON ``seconds`` (no interpreter start-up)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} … exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    if inside is not None:
        inside.append(float(json.loads(proc.stdout)["seconds"]))
    return elapsed


# A re-pull's fixed costs, taken apart: botocore's import + S3 client, then the listing (a fresh process).
CLIENT_AND_LIST = """
import sys, time
t0 = time.perf_counter()
import botocore.session
client = botocore.session.get_session().create_client("s3")
t1 = time.perf_counter()
bucket, _, prefix = sys.argv[1][len("s3://"):].partition("/")
for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
    page.get("Contents")
print(t1 - t0, time.perf_counter() - t1)
"""


def _client_and_list_s(env: dict[str, str], uri: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CLIENT_AND_LIST, uri], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    return float(out[0]), float(out[1])


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def run_pull_bench(
    work: Path | None = None,
    *,
    small_files: int = 300,
    large_files: int = 3,
    large_mb: int = 96,
    repeats: int = 3,
    notes: list[str] | None = None,
) -> list[dict[str, str]]:
    """Run P1 and P2; return rows with keys measurement, rtjob, peer, ratio, goal, met (Markdown-ready).

    ``notes`` (if given) receives lines about the setup (tree size, peer, server). Raises RuntimeError
    when a measurement cannot be taken.
    """
    notes = notes if notes is not None else []
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="rtjob-pullbench-", dir="/tmp")) if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _run(work, small_files, large_files, large_mb, repeats, notes)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, small_files: int, large_files: int, large_mb: int, repeats: int,
         notes: list[str]) -> list[dict[str, str]]:
    tree = make_tree(small_files, large_files, large_mb)
    expected = _digest(tree)
    total_mb = sum(len(v) for v in tree.values()) / 1e6
    with process_server() as (server, _proc):
        env = {**os.environ, **server.env(), "AWS_EC2_METADATA_DISABLED": "true",
               "RTJOB_HOME": str(work / "home"), "PYTHONUNBUFFERED": "1"}
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        from boto3.s3.transfer import TransferConfig

        upload = TransferConfig(max_concurrency=8)
        for rel, data in tree.items():
            if len(data) > 8 * MiB:
                source = work / "upload.bin"
                source.write_bytes(data)
                client.upload_file(str(source), BUCKET, f"{PREFIX}/{rel}", Config=upload)
            else:
                client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{rel}", Body=data)
        uri = f"s3://{BUCKET}/{PREFIX}"
        have_aws = AWS.exists()
        if have_aws:
            peer_name = "`aws s3 cp --recursive`"
            version = subprocess.run([str(AWS), "--version"], capture_output=True, text=True).stdout.strip()
            notes.append(f"peer: {version} (`aws s3 cp --recursive … --only-show-errors`, its default 10 "
                         "threads and 8 MiB parts); re-pull reference: `aws s3 sync` of the unchanged tree")
        else:
            peer_name = "boto3 `download_file` loop"
            notes.append("peer: the AWS CLI is not installed, so the peer is boto3's `download_file` called for "
                         "each key in turn (a stated substitute)")
        notes.append(f"tree: {len(tree)} files, {total_mb:.0f} MB ({small_files} files of 1–97 KiB + "
                     f"{large_files} × {large_mb} MiB) served by moto's S3 server (own process) on loopback")

        counter = iter(range(10_000))

        def rtjob_pull(dest: Path, inside: list[float] | None = None) -> float:
            return _timed([*RTJOB, "pull", uri, "--to", str(dest), "--checkpoint", "all", "--output", "json"], env,
                          inside)

        def peer_pull(dest: Path) -> float:
            if have_aws:
                return _timed([str(AWS), "s3", "cp", "--recursive", uri, str(dest), "--only-show-errors"], env)
            return _timed([sys.executable, "-c", BOTO3_LOOP, BUCKET, PREFIX, str(dest)], env)

        def fresh(kind: str) -> Path:
            dest = work / f"{kind}-{next(counter)}"
            shutil.rmtree(dest, ignore_errors=True)
            return dest

        # Warm-up (page cache, .pyc files, the server's first requests), checked for correctness.
        for pull_fn, kind in ((rtjob_pull, "rtjob"), (peer_pull, "peer")):
            dest = fresh(kind)
            pull_fn(dest)
            got = _local_digest(dest)
            if got != expected:
                missing = sorted(set(expected) - set(got))[:3]
                raise RuntimeError(f"{kind} pulled a different tree (missing e.g. {missing})")
            shutil.rmtree(dest, ignore_errors=True)

        rt_first: list[float] = []
        peer_first: list[float] = []
        rt_again: list[float] = []
        rt_again_inside: list[float] = []
        peer_again: list[float] = []
        for i in range(repeats):
            order: list[tuple[Callable[[Path], float], list[float], list[float], str]] = [
                (rtjob_pull, rt_first, rt_again, "rtjob"), (peer_pull, peer_first, peer_again, "peer")]
            if i % 2:
                order.reverse()
            for pull_fn, first, again, kind in order:
                dest = fresh(kind)
                first.append(pull_fn(dest))
                if kind == "rtjob":
                    again.append(rtjob_pull(dest, rt_again_inside))
                elif have_aws:
                    again.append(_timed([str(AWS), "s3", "sync", uri, str(dest), "--only-show-errors"], env))
                if _local_digest(dest) != expected:
                    raise RuntimeError(f"{kind}: the pulled tree differs from the uploaded one")
                shutil.rmtree(dest, ignore_errors=True)
        start_up = [_timed([*RTJOB, "--version"], env) for _ in range(3)]
        client_s, list_s = zip(*(_client_and_list_s(env, uri) for _ in range(3)), strict=True)

    speedup = statistics.median(peer_first) / statistics.median(rt_first)
    fraction = statistics.median(rt_again) / statistics.median(rt_first)
    rows = [
        {
            "measurement": f"P1. pull a checkpoint tree ({len(tree)} files, {total_mb:.0f} MB) from local S3 "
                           f"(median of {repeats})",
            "rtjob": _spread(rt_first), "peer": f"{_spread(peer_first)} {peer_name}",
            "ratio": f"{speedup:.2f}× faster", "goal": "rtjob ≥1.5× faster", "met": "yes" if speedup >= 1.5 else "no",
        },
        {
            "measurement": f"P2. re-pull of the unchanged tree (median of {repeats})",
            "rtjob": _spread(rt_again),
            "peer": f"{statistics.median(rt_first):.2f} s (rtjob's first pull)"
                    + (f"; `aws s3 sync`: {_spread(peer_again)}" if peer_again else ""),
            "ratio": f"{fraction * 100:.1f}% of the first pull", "goal": "≤5% of the first pull",
            "met": "yes" if fraction <= 0.05 else "no",
        },
        {
            "measurement": "P2b. … of which inside `rtjob pull` (JSON `seconds`: S3 client, one listing, "
                           "size/ETag/mtime checks)",
            "rtjob": _spread(rt_again_inside),
            "peer": f"{statistics.median(rt_first):.2f} s (rtjob's first pull)",
            "ratio": f"{statistics.median(rt_again_inside) / statistics.median(rt_first) * 100:.1f}% of the first pull",
            "goal": "—", "met": "—",
        },
    ]
    notes.append(f"what a re-pull of an unchanged tree costs, whatever the size of its files: interpreter + CLI "
                 f"start (`rtjob --version`) {_spread(start_up)}; botocore's import and S3 client "
                 f"{_spread(list(client_s))}; listing the tree {_spread(list(list_s))} (each in a fresh process); "
                 "the size/ETag/mtime checks are the rest of the time inside `rtjob pull`")
    notes.append("moto answers every ranged GET by reading the whole object under a per-object lock, so a large "
                 "file in fewer, larger ranges costs the server less: rtjob uses 16 MiB ranges, the CLI 8 MiB "
                 "(both within AWS's 8–16 MiB guidance); against real S3 that part of the gap is smaller")
    return rows


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-files", type=int, default=300)
    parser.add_argument("--large-files", type=int, default=3)
    parser.add_argument("--large-mb", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    notes: list[str] = []
    rows = run_pull_bench(small_files=args.small_files, large_files=args.large_files, large_mb=args.large_mb,
                          repeats=args.repeats, notes=notes)
    print("| measurement | rtjob | peer | ratio | goal | met? |\n|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['measurement']} | {row['rtjob']} | {row['peer']} | {row['ratio']} | {row['goal']} | {row['met']} |")
    print()
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
