"""Checkpointing for replicated models (DDP) inside a Ray Train worker.

Every rank holds the same weights, so only rank 0 writes a checkpoint; the other ranks
still call ``ray.train.report`` because Ray Train treats report as a barrier that every
rank must reach the same number of times. A checkpoint holds everything needed to
continue at the exact next epoch: model and optimizer state, the last finished epoch
and the metrics history (``metrics.json``), so a resumed run reports one history.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import ray.train
import torch
from torch import nn

from rtjob_contract import (
    METRICS_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    SCALER_FILE,
    STATE_FILE,
    checkpoint_dir_name,
)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DDP/DataParallel wrapper, so state keys have no 'module.'."""
    return model.module if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else model


@contextlib.contextmanager
def local_copy(found: ray.train.Checkpoint) -> Iterator[str]:
    """A local folder holding checkpoint ``found`` while the block runs: the folder itself when the storage is
    local, else a download private to this process, removed after.

    Not ``Checkpoint.as_directory()``: it shares one download folder between the processes of a node, and a worker
    arriving after the first download finished downloads again into it, truncating files a peer is reading
    (ray-project/ray#48726; here: an empty state.json on a restarted sd-pretrain worker, S3 storage, two workers on
    one machine). A real node runs several workers (g5.12xlarge: 4), so this is not only a test machine's race."""
    import pyarrow.fs

    if isinstance(found.filesystem, pyarrow.fs.LocalFileSystem):
        yield found.path
        return
    private = tempfile.mkdtemp(prefix="rtjob-restore-")
    try:
        yield found.to_directory(private)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def save_and_report(
    metrics: dict,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    history: list[dict],
    scaler: torch.amp.GradScaler | None = None,
) -> None:
    """Report ``metrics`` from every rank; rank 0 attaches the checkpoint for ``epoch`` (with fp16: the scaler's)."""
    context = ray.train.get_context()
    name = checkpoint_dir_name(epoch)
    if context.get_world_rank() != 0:
        ray.train.report(metrics, checkpoint_dir_name=name)
        return
    with tempfile.TemporaryDirectory(prefix="rtjob-ckpt-") as tmp:
        torch.save(unwrap(model).state_dict(), os.path.join(tmp, MODEL_FILE))
        save_optimizer(tmp, optimizer, scaler)
        write_run_state(tmp, {"epoch": epoch, "written_by_rank": 0, "world_size": context.get_world_size()}, history)
        # Synchronous upload: the temp dir may be removed as soon as report returns.
        ray.train.report(
            metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp), checkpoint_dir_name=name
        )


def restore(
    model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[int, list[dict]]:
    """Load the latest reported checkpoint, if any; return ``(last_epoch, history)``.

    ``last_epoch`` is the last finished epoch (0 for a fresh run), so training continues
    at ``last_epoch + 1``. Every rank loads the same files, keeping replicas identical.
    """
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0, []
    with local_copy(checkpoint) as path:
        unwrap(model).load_state_dict(torch.load(os.path.join(path, MODEL_FILE), map_location=device))
        load_optimizer(path, optimizer, device, scaler)
        return read_run_state(path)


def save_optimizer(directory: str, optimizer: torch.optim.Optimizer | None,
                   scaler: torch.amp.GradScaler | None = None) -> None:
    """The optimizer's state (``optimizer.pt``; None where it is saved elsewhere: FSDP2's shards) and, with fp16, the
    GradScaler's loss scale and growth tracker (``grad_scaler.pt``), so a resumed run goes on at the scale it had
    found instead of starting again from 2**16 and skipping steps on overflow until it is back down."""
    if optimizer is not None:
        torch.save(optimizer.state_dict(), os.path.join(directory, OPTIMIZER_FILE))
    if scaler is not None:
        torch.save(scaler.state_dict(), os.path.join(directory, SCALER_FILE))


def load_optimizer(directory: str, optimizer: torch.optim.Optimizer | None, device: torch.device,
                   scaler: torch.amp.GradScaler | None = None) -> None:
    """What ``save_optimizer`` wrote; a checkpoint without ``grad_scaler.pt`` (bf16/fp32, or written before it
    was saved) leaves ``scaler`` as it is."""
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(os.path.join(directory, OPTIMIZER_FILE), map_location=device))
    scaler_path = os.path.join(directory, SCALER_FILE)
    if scaler is not None and os.path.exists(scaler_path):
        scaler.load_state_dict(torch.load(scaler_path, weights_only=True))


def write_run_state(directory: str, state: dict, history: list[dict]) -> None:
    """Rank 0's part of any checkpoint: ``state.json`` (the epoch, the layout) and the metrics history."""
    _write_json(os.path.join(directory, STATE_FILE), state)
    _write_json(os.path.join(directory, METRICS_FILE), history)


def read_run_state(directory: str) -> tuple[int, list[dict]]:
    """``(last finished epoch, history)`` of a checkpoint folder."""
    state = _read_json(os.path.join(directory, STATE_FILE))
    return int(state["epoch"]), _read_json(os.path.join(directory, METRICS_FILE))


def _write_json(path: str, obj: object) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def _read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)
