"""The denoising objective and its epochs, with exact epoch metrics over all ranks.

A batch of clean latents gets Gaussian noise at uniform random timesteps (``DDPMScheduler.add_noise``); the UNet
predicts the noise (``epsilon``) or the velocity (``v_prediction``: ``scheduler.get_velocity``). The loss of a
sample is the mean squared error over its latent; ``train_loss`` / ``val_loss`` are means over every sample all
ranks saw (``training.hf.steps.Accumulator``: per-rank sums, all-reduced once per epoch). Validation uses noise and
timesteps fixed per held-out sample, so val_loss is comparable across epochs and world sizes.

Captions are dropped (replaced by the empty caption's embedding) with probability ``cond_drop`` so that the model
also learns the unconditional prediction that classifier-free guidance needs at sampling time.

Precision (training/hf's pieces): bf16 = autocast to bfloat16 on CPU and GPU, fp16 = autocast + GradScaler (GPU
only), fp32 = none; weights, optimizer and EMA stay fp32, and the loss is computed in fp32.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .. import checkpoint, loop, step_rows
from ..hf import steps as hf_steps

PREDICTION_TYPES = ("epsilon", "v_prediction")
TRAIN_TIMESTEPS = 1000


def noise_scheduler(prediction_type: str, timesteps: int = TRAIN_TIMESTEPS) -> Any:
    """SD's training scheduler: DDPM, 1000 steps, scaled-linear betas 0.00085..0.012."""
    from diffusers import DDPMScheduler

    if prediction_type not in PREDICTION_TYPES:
        raise ValueError(f"unknown prediction type {prediction_type!r}; choose one of {', '.join(PREDICTION_TYPES)}")
    return DDPMScheduler(num_train_timesteps=timesteps, beta_start=0.00085, beta_end=0.012,
                         beta_schedule="scaled_linear", prediction_type=prediction_type, clip_sample=False,
                         steps_offset=1)


def loss_sum(unet: nn.Module, scheduler: Any, latents: torch.Tensor, embeddings: torch.Tensor,
             noise: torch.Tensor, timesteps: torch.Tensor, precision: str) -> torch.Tensor:
    """Sum over the batch of each sample's mean squared error (carries the graph)."""
    noisy = scheduler.add_noise(latents, noise, timesteps)
    with hf_steps.autocast(precision, latents.device):
        prediction = unet(noisy, timesteps, encoder_hidden_states=embeddings).sample
    if scheduler.config.prediction_type == "epsilon":
        target = noise
    else:
        target = scheduler.get_velocity(latents, noise, timesteps)
    return F.mse_loss(prediction.float(), target.float(), reduction="none").mean(dim=(1, 2, 3)).sum()


def drop_captions(embeddings: torch.Tensor, uncond: torch.Tensor, probability: float) -> torch.Tensor:
    if probability <= 0:
        return embeddings
    drop = torch.rand(embeddings.size(0), device=embeddings.device) < probability
    return torch.where(drop[:, None, None], uncond.to(embeddings.dtype).expand_as(embeddings), embeddings)


def train_epoch(unet: nn.Module, loader: Iterable[Any], optimizer: torch.optim.Optimizer, scheduler: Any,
                device: torch.device, *, precision: str = "fp32", scaler: torch.amp.GradScaler | None = None,
                max_grad_norm: float | None = 1.0, cond_drop: float = 0.0, uncond: torch.Tensor | None = None,
                ema: Any = None) -> loop.EpochStats:
    """One epoch of optimizer steps (clipped; the EMA follows each step). Batches: ``(latents, embeddings)``."""
    unet.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    acc = hf_steps.Accumulator(device)
    steps = scheduler.config.num_train_timesteps
    rows = step_rows.meter()
    if hasattr(loader, "__len__"):
        rows.epoch_length(len(loader))
    for latents, embeddings in loader:
        latents, embeddings = latents.to(device, non_blocking=True), embeddings.to(device, non_blocking=True)
        if uncond is not None:
            embeddings = drop_captions(embeddings, uncond, cond_drop)
        noise = torch.randn_like(latents)
        timesteps = torch.randint(0, steps, (latents.size(0),), device=device)
        total = loss_sum(unet, scheduler, latents, embeddings, noise, timesteps, precision)
        loss = total / latents.size(0)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        hf_steps.optimizer_step(unet, optimizer, scaler, max_grad_norm)
        if ema is not None:
            ema.step(checkpoint.unwrap(unet).parameters())
        acc.add(total, torch.zeros((), dtype=torch.int64, device=device), latents.size(0), latents.size(0))
        rows.step_done(loss, latents.size(0), device, optimizer)
    return acc.stats()


def fixed_noise(latents: torch.Tensor, timesteps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise and timesteps for held-out samples, drawn once from ``seed`` (the same in every epoch)."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(latents.shape, generator=generator)
    return noise, torch.randint(0, timesteps, (latents.size(0),), generator=generator)


@torch.no_grad()
def evaluate(unet: nn.Module, batches: Iterable[Any], scheduler: Any, device: torch.device, *,
             precision: str = "fp32") -> loop.EpochStats:
    """Mean loss over held-out batches ``(latents, embeddings, noise, timesteps)`` (exact over all ranks)."""
    unet.eval()
    acc = hf_steps.Accumulator(device)
    for batch in batches:
        latents, embeddings, noise, timesteps = (t.to(device, non_blocking=True) for t in batch)
        total = loss_sum(unet, scheduler, latents, embeddings, noise, timesteps, precision)
        acc.add(total, torch.zeros((), dtype=torch.int64, device=device), latents.size(0), latents.size(0))
    return acc.stats()


def new_ema(unet: nn.Module, decay: float, step: int = 0) -> Any:
    """diffusers' ``EMAModel`` over ``unet``'s parameters (its shadow starts as a copy of them); decay warms up as
    ``min(decay, (1 + n) / (10 + n))`` after ``n`` optimizer steps; ``step`` continues a resumed run's count."""
    from diffusers.training_utils import EMAModel

    ema = EMAModel(checkpoint.unwrap(unet).parameters(), decay=decay)
    ema.optimization_step = step
    return ema

