"""Training-strategy benchmarks, called by ``benchmarks/run.py`` (or run alone: ``python benchmarks/training_bench.py``).

``fsdp_vs_ddp_memory()``: parameter + optimizer-state memory held per rank, FSDP2 (rtjob's
``training.fsdp2.shard_model``: fully_shard per ViT block, then the root) against DDP
(``DistributedDataParallel``, a full replica per rank), at 2 ranks over gloo on the CPU, same
model, same seed, same Adam, same steps, measured in one run. The model is the ViT at a size where
parameters dominate (``large``: 85M parameters, batch 2 of 3x32x32, so activations are small).

What is measured, per rank, after the optimizer steps (Adam state exists from the first step):

* the bytes of the tensors the rank holds for parameters and optimizer state: the local shards
  (``DTensor.to_local()``) under FSDP2, the full tensors under DDP; each storage counted once;
* gradients, the same way (FSDP2 reduce-scatters into sharded gradients; DDP keeps full ones);
* peak resident set size (``ru_maxrss``) above the rank's RSS just before the model was built:
  a secondary, noisier figure (allocator caching, DDP's gradient buckets, FSDP2's all-gather buffers).

Each strategy runs in its own fresh pair of processes (spawned), so one cannot inflate the other's
peak RSS. Rows are dicts with the keys of ``run.py``'s ``Row``: measurement, rtjob, peer, ratio,
goal, met (``Row(**row)``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `training` is imported from the checkout, as the jobs do
    sys.path.insert(0, str(ROOT))

GOAL_RATIO = 0.6  # FSDP2's parameter + optimizer memory per rank at 2 ranks, relative to DDP's
WORLD_SIZE = 2


def _held_bytes(tensors: list) -> int:
    """Bytes of the distinct storages behind ``tensors`` (local shards for DTensors)."""
    from torch.distributed.tensor import DTensor

    seen: dict[int, int] = {}
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        storage = local.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _rank_main(rank: int, strategy: str, tmp: str, vit_size: str, steps: int, batch: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn import functional as F
    from torch.nn.parallel import DistributedDataParallel

    from training.fsdp2 import shard_model
    from training.models import build_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg-{strategy}", rank=rank, world_size=WORLD_SIZE)
    try:
        baseline_mb = _rss_mb()
        torch.manual_seed(0)
        model = build_model("vit", in_channels=3, num_classes=10, image_size=32, vit_size=vit_size)
        n_params = sum(p.numel() for p in model.parameters())
        cpu = torch.device("cpu")
        module: torch.nn.Module = DistributedDataParallel(model) if strategy == "ddp" else shard_model(model, cpu)
        optimizer = torch.optim.Adam(module.parameters(), lr=1e-4)
        gen = torch.Generator().manual_seed(rank)
        start = time.perf_counter()
        for _ in range(steps):
            x = torch.randn(batch, 3, 32, 32, generator=gen)
            y = torch.randint(0, 10, (batch,), generator=gen)
            loss = F.cross_entropy(module(x), y)
            optimizer.zero_grad(set_to_none=False)  # keep the gradients to measure them
            loss.backward()
            optimizer.step()
        seconds = time.perf_counter() - start
        params = list(module.parameters())
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        result = {
            "params_mb": _held_bytes(params) / 2**20,
            "optimizer_mb": _held_bytes(state) / 2**20,
            "grads_mb": _held_bytes([p.grad for p in params]) / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "baseline_rss_mb": baseline_mb,
            "n_params": n_params,
            "step_s": seconds / steps,
        }
        Path(tmp, f"{strategy}-{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def measure(strategy: str, vit_size: str = "large", steps: int = 2, batch: int = 2) -> list[dict]:
    """Run ``strategy`` ("ddp" or "fsdp2") on 2 fresh ranks; one result dict per rank."""
    import torch.multiprocessing as mp

    # A fixed glibc mmap threshold: large tensors are mmap'ed and unmapped when freed, so the peak
    # RSS follows the live tensors instead of what the heap kept after they were freed.
    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    try:
        with tempfile.TemporaryDirectory(prefix="rtjob-bench-") as tmp:
            mp.spawn(_rank_main, args=(strategy, tmp, vit_size, steps, batch), nprocs=WORLD_SIZE, join=True)
            return [json.loads(Path(tmp, f"{strategy}-{r}.json").read_text()) for r in range(WORLD_SIZE)]
    finally:
        if saved is None:
            os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved


def fsdp_vs_ddp_memory(vit_size: str = "large", steps: int = 2, batch: int = 2) -> list[dict[str, str]]:
    """FSDP2 vs DDP memory per rank at 2 ranks (see the module docstring). Rows for ``run.py``'s table.

    Raises if a run fails (``run.py`` turns an exception into a FAILED row).
    """
    ddp = measure("ddp", vit_size, steps, batch)
    fsdp = measure("fsdp2", vit_size, steps, batch)

    def worst(runs: list[dict], *keys: str) -> float:  # the largest rank: memory is sized for it
        return max(sum(run[k] for k in keys) for run in runs)

    n = ddp[0]["n_params"]
    what = f"ViT-{vit_size} ({n / 1e6:.0f}M params), 2 ranks, gloo/CPU, Adam, batch {batch}"
    rows = []
    held_f, held_d = worst(fsdp, "params_mb", "optimizer_mb"), worst(ddp, "params_mb", "optimizer_mb")
    ratio = held_f / held_d
    rows.append({
        "measurement": f"5a. params + optimizer state held per rank, FSDP2 vs DDP ({what})",
        "rtjob": f"{held_f:.0f} MB", "peer": f"{held_d:.0f} MB", "ratio": f"{ratio:.2f}×",
        "goal": f"≤ {GOAL_RATIO}×", "met": "yes" if ratio <= GOAL_RATIO else "**no**",
    })
    grads_f, grads_d = worst(fsdp, "grads_mb"), worst(ddp, "grads_mb")
    rows.append({
        "measurement": "5b. … gradients held per rank", "rtjob": f"{grads_f:.0f} MB", "peer": f"{grads_d:.0f} MB",
        "ratio": f"{grads_f / grads_d:.2f}×", "goal": "— (info)", "met": "—",
    })
    rss_f = max(r["peak_rss_mb"] - r["baseline_rss_mb"] for r in fsdp)
    rss_d = max(r["peak_rss_mb"] - r["baseline_rss_mb"] for r in ddp)
    rows.append({
        "measurement": "5c. … peak RSS per rank above its pre-model RSS (secondary)",
        "rtjob": f"{rss_f:.0f} MB", "peer": f"{rss_d:.0f} MB", "ratio": f"{rss_f / rss_d:.2f}×",
        "goal": "— (info)", "met": "—",
    })
    step_f, step_d = worst(fsdp, "step_s"), worst(ddp, "step_s")
    rows.append({
        "measurement": "5d. … time per training step (CPU, 1 thread per rank; not a goal)",
        "rtjob": f"{step_f:.2f} s", "peer": f"{step_d:.2f} s", "ratio": f"{step_f / step_d:.2f}×",
        "goal": "— (info)", "met": "—",
    })
    return rows


if __name__ == "__main__":
    size = sys.argv[1] if len(sys.argv) > 1 else "large"
    for row in fsdp_vs_ddp_memory(size):
        print(" | ".join(row.values()))
