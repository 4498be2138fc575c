"""Checkpoints of the pretrain step: diffusers pipeline folders that are also resumable Ray Train checkpoints.

``checkpoint_epoch_NNNN/`` (rank 0, every epoch, in the run's Ray Train storage) is a ``StableDiffusionPipeline``
``save_pretrained`` folder: ``model_index.json``, ``unet/`` (the EMA weights: what samples and the reloaded
pipeline use), ``vae/``, ``text_encoder/``, ``tokenizer/`` (the preprocess step's), ``scheduler/`` (the DDPM
training scheduler), so ``StableDiffusionPipeline.from_pretrained(folder, safety_checker=None)`` generates. What
resuming needs besides: ``unet_train/`` (the raw trained weights), ``optimizer.pt`` (+ ``grad_scaler.pt`` with
fp16), ``metrics.json`` (the whole history) and ``state.json`` (written last; holds the EMA's optimizer-step
count).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import ray.train
import torch
from torch import nn

from .. import checkpoint
from ..hf.checkpoint import latest
from . import objective, sampling

UNET_DIR, TRAIN_UNET_DIR = "unet", "unet_train"
__all__ = ["latest", "export", "save_and_report", "restore"]


@contextlib.contextmanager
def ema_weights(unet: nn.Module, ema: Any) -> Iterator[nn.Module]:
    """``unet`` holding the EMA weights inside the block, its own weights again after it."""
    ema.store(unet.parameters())
    ema.copy_to(unet.parameters())
    try:
        yield unet
    finally:
        ema.restore(unet.parameters())


def export(directory: str, unet: nn.Module, ema: Any, frozen: tuple[Any, Any, Any], scheduler: Any) -> None:
    """The pipeline folder (EMA weights as ``unet/``) plus the raw weights in ``unet_train/``."""
    unet = checkpoint.unwrap(unet)
    vae, text_encoder, tokenizer = frozen
    with ema_weights(unet, ema):
        sampling.build_pipeline(unet, vae, text_encoder, tokenizer, scheduler).save_pretrained(directory)
    unet.save_pretrained(os.path.join(directory, TRAIN_UNET_DIR))


def save_and_report(metrics: dict, *, unet: nn.Module, optimizer: torch.optim.Optimizer, ema: Any,
                    frozen: tuple[Any, Any, Any] | None, scheduler: Any, epoch: int, history: list[dict],
                    scaler: torch.amp.GradScaler | None = None) -> None:
    """Every rank reports ``metrics``; rank 0 (which alone holds ``frozen``) attaches the epoch's checkpoint."""
    context = ray.train.get_context()
    name = checkpoint.checkpoint_dir_name(epoch)
    if context.get_world_rank() != 0 or frozen is None:
        ray.train.report(metrics, checkpoint_dir_name=name)
        return
    with tempfile.TemporaryDirectory(prefix="rtjob-ckpt-") as tmp:
        export(tmp, unet, ema, frozen, scheduler)
        checkpoint.save_optimizer(tmp, optimizer, scaler)
        state = {"epoch": epoch, "written_by_rank": 0, "world_size": context.get_world_size(),
                 "ema_step": ema.optimization_step, "unet": f"EMA weights ({TRAIN_UNET_DIR}/: raw weights)"}
        checkpoint.write_run_state(tmp, state, history)
        # Synchronous upload: the temp dir may be removed as soon as report returns.
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp), checkpoint_dir_name=name)


def restore(path: str, unet: nn.Module, device: torch.device, ema_decay: float) -> tuple[Any, int, list[dict]]:
    """Load checkpoint ``path`` into the (unwrapped, not yet on ``device``) ``unet``: returns ``(the EMA,
    last finished epoch, history)``; the UNet ends on ``device`` with the raw trained weights."""
    from diffusers import UNet2DConditionModel

    with open(os.path.join(path, checkpoint.STATE_FILE)) as f:
        ema_step = int(json.load(f)["ema_step"])
    unet.load_state_dict(UNet2DConditionModel.from_pretrained(os.path.join(path, UNET_DIR)).state_dict())
    unet.to(device)
    ema = objective.new_ema(unet, ema_decay, ema_step)  # the shadow starts as a copy: the EMA weights
    unet.load_state_dict(UNet2DConditionModel.from_pretrained(os.path.join(path, TRAIN_UNET_DIR)).state_dict())
    last_epoch, history = checkpoint.read_run_state(path)
    return ema, last_epoch, history

