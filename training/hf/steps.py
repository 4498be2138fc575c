"""Token-level training and evaluation epochs for causal LMs, with exact epoch metrics over all ranks.

Each rank sums the cross-entropy of every target token (labels != -100), the correct next-token predictions and
the target-token count; the sums are all-reduced once per epoch and only then divided (``loop.all_reduce``). So
``train_loss`` / ``val_loss`` are token-weighted means over every target token all ranks saw, and
``val_accuracy`` is next-token accuracy on target tokens. The gradient of an optimizer step is likewise the mean
over every target token of that step on all ranks (``--grad-accum`` micro-batches per step): the step's token
count is all-reduced before its backward passes, since DDP and FSDP average gradients over ranks.

Precision: ``bf16`` = autocast to bfloat16 (CPU and GPU; weights and optimizer stay fp32), ``fp16`` = autocast to
float16 with a GradScaler (GPU only), ``fp32`` = no autocast.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from .. import loop, precision, step_rows
from ..events import first_step
from .data import IGNORE

Batch = dict[str, torch.Tensor]


# The one precision rule of every entrypoint (training/precision.py), under the names this module's callers use.
check_precision = precision.check
autocast = precision.autocast
grad_scaler = precision.grad_scaler


def token_sums(model: nn.Module, batch: Batch, precision: str, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(summed loss, correct predictions, target tokens)`` of one batch; the loss sum carries the graph."""
    with autocast(precision, device):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits = logits[:, :-1].float()  # position t predicts token t + 1; the loss in fp32
    targets = batch["labels"][:, 1:]
    loss_sum = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE,
                               reduction="sum")
    mask = targets != IGNORE
    correct = ((logits.detach().argmax(dim=-1) == targets) & mask).sum()
    return loss_sum, correct, mask.sum()


def windows(loader: Iterable[Batch], size: int) -> Iterator[list[Batch]]:
    """``size`` consecutive batches at a time (the last window may be shorter)."""
    window: list[Batch] = []
    for batch in loader:
        window.append(batch)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce on accumulation micro-steps (DDP's no_sync, FSDP2's requires_gradient_sync)."""
    if enabled:
        yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    elif hasattr(model, "no_sync"):  # DDP
        with model.no_sync():
            yield
    else:
        yield


class Accumulator:
    """Per-rank sums on the device (no host sync per batch), reduced over all ranks at the end."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.correct = torch.zeros((), dtype=torch.int64, device=device)
        self.tokens = torch.zeros((), dtype=torch.int64, device=device)
        self.samples = 0
        if dist.is_available() and dist.is_initialized():
            loop.barrier(device)  # every rank starts its clock together (rank 0 may still be writing a checkpoint)
        self.start = time.perf_counter()

    def add(self, loss_sum: torch.Tensor, correct: torch.Tensor, tokens: torch.Tensor, samples: int) -> None:
        self.loss += loss_sum.detach().double()
        self.correct += correct
        self.tokens += tokens
        self.samples += samples

    def stats(self) -> loop.EpochStats:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - self.start
        loss, correct, tokens, samples = loop.all_reduce(
            [self.loss.item(), self.correct.item(), self.tokens.item(), self.samples], self.device)
        time_max, mem_max = loop.all_reduce([elapsed, loop.peak_memory_mb(self.device)], self.device,
                                            dist.ReduceOp.MAX)
        return loop.EpochStats(loss=loss / max(tokens, 1), accuracy=correct / max(tokens, 1), samples=int(samples),
                               time_s=time_max, samples_per_s=samples / time_max if time_max > 0 else 0.0,
                               peak_mem_mb=mem_max)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def train_epoch(
    model: nn.Module, loader: Iterable[Batch], optimizer: torch.optim.Optimizer, device: torch.device, *,
    precision: str = "fp32", grad_accum: int = 1, scaler: torch.amp.GradScaler | None = None,
    max_grad_norm: float | None = None,
) -> loop.EpochStats:
    """One epoch: an optimizer step every ``grad_accum`` batches; ``samples`` counts sequences."""
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    acc = Accumulator(device)
    rows = step_rows.meter()
    if hasattr(loader, "__len__"):
        rows.epoch_length(-(-len(loader) // grad_accum))
    for window in windows(loader, grad_accum):
        batches = [to_device(b, device) for b in window]
        step_tokens = sum((b["labels"][:, 1:] != IGNORE).sum() for b in batches)
        global_tokens = loop.all_reduce([float(step_tokens)], device)[0]
        # Ranks' gradients are averaged (÷ world), so × world ÷ all tokens = the mean over every target token.
        scale = world / max(global_tokens, 1.0)
        window_loss = torch.zeros((), dtype=torch.float32, device=device)
        for i, batch in enumerate(batches):
            with gradient_sync(model, enabled=i == len(batches) - 1):
                loss_sum, correct, tokens = token_sums(model, batch, precision, device)
                loss = loss_sum * scale
                (scaler.scale(loss) if scaler is not None else loss).backward()
            acc.add(loss_sum, correct, tokens, batch["input_ids"].size(0))
            window_loss += loss_sum.detach().float()
        optimizer_step(model, optimizer, scaler, max_grad_norm)
        # This rank's token-mean loss of the step (a tensor: read once per step row, not per step).
        rows.step_done(window_loss / step_tokens.clamp(min=1), sum(b["input_ids"].size(0) for b in batches),
                       device, optimizer)
    return acc.stats()


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
                   max_grad_norm: float | None) -> None:
    """Unscale (fp16), clip the gradient norm (when ``max_grad_norm``), step, update the scaler, zero the grads."""
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], max_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    first_step(dist.get_rank() if dist.is_initialized() else 0)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Any], device: torch.device, *, precision: str = "fp32") -> loop.EpochStats:
    """Loss and next-token accuracy over the target tokens of ``batches`` (exact over all ranks)."""
    model.eval()
    acc = Accumulator(device)
    for batch in batches:
        batch = to_device(batch, device)
        loss_sum, correct, tokens = token_sums(model, batch, precision, device)
        acc.add(loss_sum, correct, tokens, batch["input_ids"].size(0))
    return acc.stats()
