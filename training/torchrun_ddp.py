"""Vanilla PyTorch DDP under torchrun: ``torchrun --nproc-per-node N -m training.torchrun_ddp [flags]``.

The workshop's hand-written DDP, done right: ``init_process_group`` from torchrun's
environment (gloo on CPU, nccl on GPU), a ``DistributedSampler`` with ``set_epoch`` every
epoch, the dataset prepared by local rank 0 while the other ranks wait at a barrier,
epoch metrics that are exact means over all ranks (``training.loop``), and a checkpoint
written by rank 0 only, from which a restarted run continues at the next epoch.

Across several nodes of a Ray cluster, ``training.torchrun_launcher`` starts one torchrun
per node (no SSH). Without torchrun's variables (RANK, WORLD_SIZE, ...) it trains in one
process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

import rtjob_contract as contract

from . import data, file_checkpoint, loop, options, precision, step_rows, system_rows
from .models import model_for


def log(message: str, *, all_ranks: bool = False) -> None:
    rank = int(os.environ.get("RANK", "0"))
    if all_ranks or rank == 0:
        print(message if not all_ranks else f"[rank {rank}] {message}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node N -m training.torchrun_ddp",
        description="Vanilla PyTorch DDP under torchrun (ResNet18 or ViT; MNIST, FashionMNIST, CIFAR-10 or synthetic)",
    )
    try:  # defaults come from RTJOB_* variables: a bad value is a usage error, not a crash
        options.add_training_args(parser)
        group = parser.add_argument_group("run")
        group.add_argument(
            "--use-gpu", action=argparse.BooleanOptionalAction,
            default=options.env_bool(contract.ENV_USE_GPU, torch.cuda.is_available()),
            help="one GPU per process, nccl (env RTJOB_USE_GPU; default: if CUDA is available)",
        )
        options.add_file_run_args(
            group, "; required with more than one process, so that every rank agrees"
        )
    except ValueError as exc:
        parser.error(str(exc))
    args = parser.parse_args(argv)
    precision.resolve_arg(parser, args)
    if not args.run_name:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            parser.error("--run-name (or RTJOB_RUN_NAME) is required with more than one process")
        args.run_name = f"rtjob-torchrun-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return args


def setup() -> tuple[int, int, int, torch.device, bool]:
    """``(rank, local_rank, world_size, device, distributed)`` from torchrun's environment."""
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return rank, local_rank, world_size, torch.device("cpu"), "RANK" in os.environ


def train(args: argparse.Namespace) -> dict:
    # One intra-op thread per process, as in training.ray_ddp: processes share the cores.
    torch.set_num_threads(1)
    rank, local_rank, world_size, device, distributed = setup()
    step_rows.configure(args.log_every_steps)
    if local_rank == 0:  # one sampler per node (the companion drops its own node's: it samples that itself)
        system_rows.start_sampler()
    if args.use_gpu:
        if not torch.cuda.is_available():
            raise SystemExit("ERROR: --use-gpu but CUDA is not available here")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", timeout=timedelta(minutes=10),
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    try:
        return _train(args, rank, local_rank, world_size, device, distributed)
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()


def _train(
    args: argparse.Namespace, rank: int, local_rank: int, world_size: int, device: torch.device, distributed: bool
) -> dict:
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)

    # The data folder is per node: local rank 0 prepares (downloads) it, the others wait.
    def load() -> tuple:
        return data.load_datasets(args.dataset, args.data_dir, args.train_size, args.val_size, args.seed)

    if local_rank == 0:
        train_set, val_set = load()
    if distributed:
        dist.barrier()
    if local_rank != 0:
        train_set, val_set = load()

    batch_size = max(1, args.global_batch_size // world_size)
    log(data.describe(args.dataset, len(train_set), len(val_set), args.data_dir))
    log(f"DATA: {world_size} processes x batch {batch_size} per step "
        f"(backend {dist.get_backend() if distributed else 'none'}, device {device.type})")
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    pin = device.type == "cuda"
    train_loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, pin_memory=pin)
    # Validation: every sample exactly once over all ranks (no padding), so the means are exact.
    val_loader = DataLoader(data.eval_shard(val_set, rank, world_size), batch_size=batch_size, pin_memory=pin)

    amp, line = precision.for_device(args.precision, device)
    log(line)
    model = model_for(vars(args)).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scaler = precision.grad_scaler(amp, device)
    forward = precision.maybe_compile(model, args.compile)  # checkpoints save `model`

    storage = file_checkpoint.RunStorage(args.storage_path, args.run_name)
    last_epoch, history, restored = file_checkpoint.restore(storage, model, optimizer, device, scaler)
    if last_epoch:
        log(loop.resume_line(last_epoch, args.epochs, restored or ""))

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        return (loop.train_epoch(forward, train_loader, optimizer, device, precision=amp, scaler=scaler),
                loop.evaluate(forward, val_loader, device, precision=amp))

    path = restored

    def save(epoch: int, metrics: dict) -> None:
        nonlocal path
        if rank == 0:
            path = file_checkpoint.save(storage, model=model, optimizer=optimizer, epoch=epoch, history=history,
                                        world_size=world_size, keep=args.keep_checkpoints, scaler=scaler)
        if distributed:
            dist.barrier()  # nobody starts the next epoch (or exits) before the checkpoint exists

    loop.run_epochs(last_epoch + 1, args.epochs, history, one_epoch, save, log, amp)
    return {"metrics": history[-1] if history else {}, "checkpoint": path, "run_dir": storage.display}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = os.environ.get("WORLD_SIZE", "1")
    log(f"RUN: name={args.run_name} storage={args.storage_path} processes={world} use_gpu={args.use_gpu} "
        f"dataset={args.dataset} epochs={args.epochs} global_batch_size={args.global_batch_size} "
        f"precision={args.precision}{' compile' if args.compile else ''}")
    try:
        result = train(args)
    except data.DatasetUnavailable as exc:
        log(f"ERROR: {exc}", all_ranks=True)
        return 1
    log(f"RESULT: metrics={json.dumps(result['metrics'], sort_keys=True)}")
    log(f"RESULT: checkpoint={result['checkpoint']}")
    log(f"RESULT: run_dir={result['run_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
