"""The Ray Train worker loop shared by the sharded strategies (FSDP2, DeepSpeed ZeRO).

It differs from the DDP loop (``training.ray_ddp``) in two ways that sharding forces:

* **Checkpoints come from every rank.** No rank holds the whole model or optimizer, so
  each rank writes its own shard into a local temporary folder and reports it; Ray Train
  uploads every rank's folder into the same ``checkpoint_epoch_NNNN`` folder of the run.
  Rank 0 adds ``state.json`` (the epoch) and ``metrics.json`` (the history), and the
  strategy may add a full, plain-model export (``model.pt``) that rank 0 writes after a
  collective gather.
* **Evaluation runs in lockstep.** A sharded forward is a collective (parameters are
  gathered block by block), so every rank must run the same number of forwards. The
  validation set is split exactly (``data.eval_shard``: every sample once, no padding, so
  the means stay exact) and ranks with one batch fewer run one uncounted forward.

A strategy supplies the module to call, the backward+step, and its checkpoint save/load
(see ``Strategy``); ``training.fsdp2`` and ``training.deepspeed_ray`` are the two.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import ray.train
import ray.train.torch
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from . import checkpoint, data, loop, precision
from .models import model_for
from .ray_ddp import set_sampler_epoch, setup_worker, worker_data

log = logging.getLogger(__name__)
FULL_MODEL_FILE = checkpoint.MODEL_FILE  # model.pt: the plain model's full state dict


class Strategy(Protocol):
    name: str  # recorded in state.json, e.g. "fsdp2", "deepspeed-zero2"
    summary: str  # one line for the log: the strategy and its options
    module: nn.Module  # what the loop calls forward on (the sharded model or the engine)

    def step(self, loss: torch.Tensor) -> None:
        """Backward pass and optimizer step for one batch."""

    def save(self, directory: str, epoch: int) -> dict:
        """Every rank: write this rank's part of the checkpoint into ``directory`` (collective).

        Returns what ``state.json`` should record about the layout.
        """

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Every rank (collective): the plain model's state dict on rank 0, None elsewhere."""

    def load(self, directory: str) -> None:
        """Every rank: restore model and optimizer state from a checkpoint folder."""


StrategyFactory = Callable[[nn.Module, dict, torch.device], Strategy]


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # Mixed precision gives bf16 logits; the loss (and its reported mean) is computed in fp32.
    return F.cross_entropy(outputs.float(), targets)


def lockstep_batches(
    loader: DataLoader, batches: int, model: nn.Module, sample: torch.Tensor
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``loader``'s batches, then run uncounted forwards until ``batches`` were run.

    Used inside ``loop.evaluate`` (no_grad, eval mode): the extra forwards only keep this
    rank's collectives in step with ranks that have one more batch.
    """
    done = 0
    for batch in loader:
        done += 1
        yield batch
    for _ in range(batches - done):
        model(sample)


def lockstep_eval(
    model: nn.Module, dataset: Any, rank: int, world_size: int, batch_size: int, device: torch.device
) -> loop.EpochStats:
    shard = data.eval_shard(dataset, rank, world_size)
    batches = math.ceil(math.ceil(len(dataset) / world_size) / batch_size)  # of the longest shard
    sample = dataset[0][0].unsqueeze(0).to(device)
    loader = DataLoader(shard, batch_size=batch_size)
    return loop.evaluate(model, lockstep_batches(loader, batches, model, sample), device, loss_fn)


def train_loop(config: dict, make_strategy: StrategyFactory) -> None:
    """The body of a Ray Train worker for a sharded strategy."""
    setup_worker(config)
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    torch.manual_seed(config["seed"])  # identical initial weights: each rank keeps its shard of them

    train_set, val_set, batch_size = worker_data(config, rank, world_size)
    # DistributedSampler pads the training set to equal shards: equal batch counts per rank.
    train_loader = ray.train.torch.prepare_data_loader(
        DataLoader(train_set, batch_size=batch_size, shuffle=True)
    )
    device = ray.train.torch.get_device()
    amp, line = precision.for_device(config.get("precision") or "fp32", device)
    model = model_for(config)
    params = sum(p.numel() for p in model.parameters())
    strategy = make_strategy(model, {**config, "precision": amp}, device)  # it applies the precision itself
    last_epoch, history = restore(strategy)
    if rank == 0:
        log.info(line)
        log.info(f"MODEL: {config['model']} ({params / 1e6:.2f}M parameters), {strategy.summary}")
        if last_epoch:
            log.info(loop.resume_line(last_epoch, config["epochs"]))

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        set_sampler_epoch(train_loader, epoch)
        train_stats = loop.train_epoch(strategy.module, train_loader, None, device, loss_fn, step=strategy.step)
        return train_stats, lockstep_eval(strategy.module, val_set, rank, world_size, batch_size, device)

    def report(epoch: int, metrics: dict) -> None:
        save_and_report(metrics, strategy=strategy, epoch=epoch, history=history)

    loop.run_epochs(last_epoch + 1, config["epochs"], history, one_epoch, report, log.info if rank == 0 else None,
                    amp)


def save_and_report(metrics: dict, *, strategy: Strategy, epoch: int, history: list[dict]) -> None:
    """Every rank writes its shard and reports it; rank 0 adds the full model, state and history."""
    context = ray.train.get_context()
    rank = context.get_world_rank()
    with tempfile.TemporaryDirectory(prefix="rtjob-ckpt-") as tmp:
        layout = strategy.save(tmp, epoch)
        full = strategy.full_state_dict()
        if rank == 0:
            if full is not None:
                torch.save(full, os.path.join(tmp, FULL_MODEL_FILE))
            state = {"epoch": epoch, "world_size": context.get_world_size(), "strategy": strategy.name,
                     "full_model": FULL_MODEL_FILE if full is not None else None, **layout}
            checkpoint.write_run_state(tmp, state, history)
        ray.train.report(
            metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
            checkpoint_dir_name=checkpoint.checkpoint_dir_name(epoch),
        )


def restore(strategy: Strategy) -> tuple[int, list[dict]]:
    """Load the latest reported checkpoint, if any: ``(last finished epoch, history)``."""
    ckpt = ray.train.get_checkpoint()
    if ckpt is None:
        return 0, []
    with checkpoint.local_copy(ckpt) as path:
        strategy.load(path)
        return checkpoint.read_run_state(path)
