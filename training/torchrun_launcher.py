"""Run ``torchrun`` on N nodes of a Ray cluster, without SSH: ``python -m training.torchrun_launcher [flags]``.

The workshop's ``launch_multinode_ddp.sh`` prints one ``torchrun`` command per machine and
leaves the SSH, the IP of node 0 and a free port to you. This launcher, run as a Ray job's
entrypoint, does that itself:

1. reserves one bundle per node (a placement group, ``STRICT_SPREAD``: no two bundles on one
   node) holding that node's workers' resources (``nproc_per_node`` x CPUs/GPUs per worker);
2. starts one small actor in each bundle; node 0's actor reports its IP and a free port;
3. each actor runs ``torchrun --nnodes N --node-rank i --nproc-per-node P --master-addr IP
   --master-port PORT -m training.torchrun_ddp ...`` (one node: ``torchrun --standalone``),
   streams its output back line by line (printed as ``[node i] ...``);
4. if any node's torchrun exits non-zero (or its node dies), every node's torchrun is ended
   and the whole group is started again from the last checkpoint, up to ``--max-failures``
   times (env RTJOB_MAX_FAILURES); after that the launcher exits 1.

Flags it does not know are passed on to the training module, e.g.
``python -m training.torchrun_launcher --nodes 2 --epochs 3 --dataset synthetic``.
A process tree started by a node's actor is ended when that actor dies (the job was stopped,
the launcher was killed): a watcher outside the actor kills every process carrying the tree's
marker variable, so no training process outlives its job.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import rtjob_contract as contract

from . import options

MARKER = "RTJOB_TORCHRUN_TREE"

# Runs outside the actor (double-forked): once the actor's process is gone, kill every process
# whose environment carries this tree's marker (torchrun starts its workers in new sessions, so
# neither a process group nor the parent chain reaches all of them).
_WATCHER = r"""
import os, signal, sys, time
pid, marker = int(sys.argv[1]), sys.argv[2].encode()
def alive(p):
    try:
        os.kill(p, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
while alive(pid):
    time.sleep(0.5)
for _ in range(3):
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
    time.sleep(0.5)
"""


class NodeRunner:
    """One per node (a Ray actor in that node's bundle): runs and streams that node's torchrun."""

    def info(self) -> dict:
        import socket

        import ray

        return {"ip": ray.util.get_node_ip_address(), "host": socket.gethostname(),
                "node_id": ray.get_runtime_context().get_node_id()}

    def free_port(self) -> int:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def run(self, cmd: list[str]) -> Iterator[str | int]:
        """Yield torchrun's output lines, then its exit code (an int)."""
        tree = uuid.uuid4().hex
        env = {**os.environ, MARKER: tree, "PYTHONUNBUFFERED": "1"}
        # The watcher must not be a child of this actor (Ray kills an exiting worker's children).
        subprocess.run(
            ["/bin/sh", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(_WATCHER)} {os.getpid()} "
             f"{shlex.quote(f'{MARKER}={tree}')} </dev/null >/dev/null 2>&1 &"],
            check=True, start_new_session=True,
        )
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, start_new_session=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            yield line.rstrip("\n")
        yield proc.wait()


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.torchrun_launcher",
        description="torchrun on N nodes of a Ray cluster (one torchrun per node, no SSH); "
        "unknown flags go to the training module",
    )
    try:
        nodes = options.env_int(contract.ENV_NODES, 1)
        workers = options.env_int(contract.ENV_NUM_WORKERS, 2 * nodes)
        parser.add_argument("--nodes", type=options.positive_int, default=nodes,
                            help="nodes, one torchrun each (env RTJOB_NODES, default 1: torchrun --standalone)")
        parser.add_argument("--nproc-per-node", type=options.positive_int, default=max(1, workers // nodes),
                            help="processes per node (default: RTJOB_NUM_WORKERS / RTJOB_NODES)")
        parser.add_argument("--cpus-per-worker", type=float, default=options.env_float(contract.ENV_CPUS_PER_WORKER, 1.0))
        parser.add_argument("--gpus-per-worker", type=float, default=options.env_float(contract.ENV_GPUS_PER_WORKER, 0.0))
        parser.add_argument("--max-failures", type=int, default=options.env_int(contract.ENV_MAX_FAILURES, 0),
                            help="restarts of the whole group from the last checkpoint (env RTJOB_MAX_FAILURES, "
                            "-1 = unlimited)")
        parser.add_argument("--module", default=f"{__package__}.torchrun_ddp", help="the training module torchrun runs")
        parser.add_argument("--placement-timeout", type=float, default=600.0,
                            help="seconds to wait for the nodes' resources")
    except ValueError as exc:
        parser.error(str(exc))
    args, rest = parser.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    # Every node must use the same run folder: pin the name here, not in each process.
    if not any(a == "--run-name" or a.startswith("--run-name=") for a in rest) and not os.environ.get(contract.ENV_RUN_NAME):
        rest += ["--run-name", f"rtjob-torchrun-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"]
    return args, rest


def torchrun_command(args: argparse.Namespace, node_rank: int, master_addr: str, master_port: int,
                     rest: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc_per_node)]
    if args.nodes == 1:
        cmd += ["--standalone"]  # c10d rendezvous on a free local port
    else:
        cmd += ["--nnodes", str(args.nodes), "--node-rank", str(node_rank),
                "--master-addr", master_addr, "--master-port", str(master_port)]
    return [*cmd, "-m", args.module, *rest]


class Attempt:
    """One start of torchrun on every node; ends at the first failure or when all succeed."""

    def __init__(self, runners: list, cmds: list[list[str]]) -> None:
        self.runners, self.cmds = runners, cmds
        self.codes: list[int | None] = [None] * len(runners)
        self.failure: str | None = None
        self.lock = threading.Lock()
        self.failed = threading.Event()

    def _stream(self, i: int) -> None:
        import ray

        try:
            for ref in self.runners[i].run.options(num_returns="streaming").remote(self.cmds[i]):
                item = ray.get(ref)
                if isinstance(item, int):
                    self.codes[i] = item
                else:
                    with self.lock:
                        print(f"[node {i}] {item}", flush=True)
        except Exception as exc:  # noqa: BLE001 - the actor or its node died: a node failure
            if not self.failed.is_set():
                self._fail(f"node {i} was lost ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]})")
            return
        if self.codes[i] != 0:
            self._fail(f"torchrun on node {i} exited with code {self.codes[i]}")

    def _fail(self, why: str) -> None:
        with self.lock:
            if self.failure is None:
                self.failure = why
        self.failed.set()

    def run(self) -> str | None:
        """None on success, else why it failed."""
        threads = [threading.Thread(target=self._stream, args=(i,), daemon=True) for i in range(len(self.runners))]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and not self.failed.is_set():
            time.sleep(0.2)
        return self.failure


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(log_to_driver=False)  # the actors print nothing; their output comes back as data
    bundle = {"CPU": args.nproc_per_node * args.cpus_per_worker}
    if args.gpus_per_worker:
        bundle["GPU"] = args.nproc_per_node * args.gpus_per_worker
    strategy = "STRICT_SPREAD" if args.nodes > 1 else "PACK"
    print(f"LAUNCH: {args.nodes} node(s) x torchrun --nproc-per-node {args.nproc_per_node}; each node reserves "
          f"{bundle} ({strategy}); training module {args.module}", flush=True)
    pg = placement_group([dict(bundle) for _ in range(args.nodes)], strategy=strategy)
    ready, _ = ray.wait([pg.ready()], timeout=args.placement_timeout)
    if not ready:
        print(f"ERROR: the cluster did not offer {args.nodes} separate node(s) with {bundle} each within "
              f"{args.placement_timeout:g}s", file=sys.stderr, flush=True)
        return 1
    runner_cls = ray.remote(NodeRunner)
    failures = 0
    try:
        while True:
            runners = [
                runner_cls.options(
                    num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0), max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
                ).remote()
                for i in range(args.nodes)
            ]
            nodes = ray.get([r.info.remote() for r in runners])
            port = ray.get(runners[0].free_port.remote())
            master = nodes[0]["ip"]
            cmds = [torchrun_command(args, i, master, port, rest) for i in range(args.nodes)]
            for i, node in enumerate(nodes):
                print(f"LAUNCH: node {i} = {node['ip']} ({node['node_id'][:8]}): {shlex.join(cmds[i][1:])}",
                      flush=True)
            why = Attempt(runners, cmds).run()
            for runner in runners:  # ends every node's torchrun (the watchers kill the trees)
                ray.kill(runner)
            if why is None:
                print(f"LAUNCH: torchrun succeeded on all {args.nodes} node(s)", flush=True)
                return 0
            failures += 1
            if args.max_failures != -1 and failures > args.max_failures:
                print(f"ERROR: {why}; no restarts left (max_failures={args.max_failures})",
                      file=sys.stderr, flush=True)
                return 1
            limit = "unlimited" if args.max_failures == -1 else str(args.max_failures)
            print(f"RESTART: {why}; restarting torchrun on all {args.nodes} node(s) from the last checkpoint "
                  f"(failure {failures}/{limit})", flush=True)
            time.sleep(2.0)  # let the watchers end the old trees before new ones bind ports
    finally:
        remove_placement_group(pg)


if __name__ == "__main__":
    sys.exit(main())
