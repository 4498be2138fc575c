"""One training/evaluation loop whose epoch metrics are true means over all ranks.

Each rank accumulates ``sum(loss * batch_size)``, correct predictions and sample counts;
the sums are all-reduced when ``torch.distributed`` is initialised and only then divided.
So the reported loss is the mean over every sample the epoch saw (not the last batch,
not an average of per-rank averages, and validation is divided by validation samples).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

import rtjob_contract as contract

from . import precision as amp
from . import step_rows
from .events import first_step

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# Backward pass + optimizer step for one batch's loss, for engines that own both (DeepSpeed).
StepFn = Callable[[torch.Tensor], None]


@dataclass(frozen=True)
class EpochStats:
    loss: float  # mean loss per sample, over all ranks
    accuracy: float
    samples: int  # samples seen by all ranks together
    time_s: float  # slowest rank's wall time: the epoch ends when it does
    samples_per_s: float  # global throughput: samples / time_s
    peak_mem_mb: float  # largest per-rank peak (GPU: max allocated; CPU: process RSS)

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


def train_epoch(
    model: nn.Module,
    loader: Batches,
    optimizer: torch.optim.Optimizer | None,
    device: torch.device,
    loss_fn: LossFn = F.cross_entropy,
    step: StepFn | None = None,
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
) -> EpochStats:
    """``optimizer`` steps after ``loss.backward()`` (through ``scaler`` with fp16); or pass ``optimizer=None,
    step=fn``. The forward pass and the loss run under ``precision``'s autocast (training/precision.py)."""
    if step is None:
        if optimizer is None:
            raise ValueError("train_epoch needs an optimizer or a step function")
        step = optimizer_step(optimizer, scaler)
    return _run_epoch(model, loader, device, loss_fn, step, precision, optimizer)


def optimizer_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None = None) -> StepFn:
    def step(loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
            return
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # skipped when the scaled gradients overflowed
        scaler.update()

    return step


@torch.no_grad()
def evaluate(model: nn.Module, loader: Batches, device: torch.device, loss_fn: LossFn = F.cross_entropy, *,
             precision: str = "fp32") -> EpochStats:
    return _run_epoch(model, loader, device, loss_fn, None, precision)


def _run_epoch(
    model: nn.Module, loader: Batches, device: torch.device, loss_fn: LossFn,
    step: StepFn | None, precision: str = "fp32", optimizer: torch.optim.Optimizer | None = None,
) -> EpochStats:
    """``optimizer``: whose learning rate the step rows show (None: they show none)."""
    model.train(step is not None)
    rows = step_rows.meter()
    if step is not None and hasattr(loader, "__len__"):
        rows.epoch_length(len(loader))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    # Accumulate on the device so the loop never forces a host sync per batch.
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    count = 0
    if dist.is_available() and dist.is_initialized():
        # Every rank starts its clock together. Otherwise a rank that went on while rank 0 was still
        # writing or uploading the last checkpoint counts its wait for rank 0 as training time.
        barrier(device)
    start = time.perf_counter()
    for inputs, targets in loader:
        inputs = inputs.to(device, non_blocking=True)  # no-op if the loader already moved them
        targets = targets.to(device, non_blocking=True)
        with amp.autocast(precision, device):
            outputs = model(inputs)
        loss = loss_fn(outputs.float(), targets)  # batch mean, used for the gradient; in fp32 under autocast too
        batch = targets.size(0)
        if step is not None:
            step(loss)
            first_step(dist.get_rank() if dist.is_initialized() else 0)
            rows.step_done(loss, batch, device, optimizer)
        loss_sum += loss.detach().double() * batch
        correct += (outputs.argmax(dim=1) == targets).sum()
        count += batch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start

    loss_total, correct_total, count_total = all_reduce(
        [loss_sum.item(), correct.item(), count], device, dist.ReduceOp.SUM
    )
    time_max, mem_max = all_reduce([elapsed, peak_memory_mb(device)], device, dist.ReduceOp.MAX)
    count_total = int(count_total)
    return EpochStats(
        loss=loss_total / max(count_total, 1),
        accuracy=correct_total / max(count_total, 1),
        samples=count_total,
        time_s=time_max,
        samples_per_s=count_total / time_max if time_max > 0 else 0.0,
        peak_mem_mb=mem_max,
    )


def barrier(device: torch.device) -> None:
    """``dist.barrier`` on ``device``'s GPU. Without ``device_ids`` NCCL guesses the GPU from the global rank (and
    warns "Guessing device ID based on global rank ... can cause a hang"): Ray Train's process group is not bound
    to a device (its ``init_process_group`` passes no ``device_id``), so rtjob names it here."""
    if device.type == "cuda" and device.index is not None:
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def all_reduce(
    values: list[float], device: torch.device, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM
) -> list[float]:
    """Reduce a few scalars over all ranks; identity when not running distributed."""
    if not (dist.is_available() and dist.is_initialized()):
        return [float(v) for v in values]
    # float64 keeps sample counts and loss sums exact well beyond any dataset size here.
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    # ru_maxrss is the process's peak resident set size, in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def format_epoch_line(epoch: int, epochs: int, train: EpochStats, val: EpochStats, seconds: float) -> str:
    return (
        f"epoch {epoch}/{epochs} train_loss={train.loss:.4f} val_loss={val.loss:.4f} "
        f"val_acc={val.accuracy:.4f} samples/s={train.samples_per_s:.1f} time={seconds:.1f}s "
        f"peak_mem={train.peak_mem_mb:.0f}MB"
    )


def resume_line(last_epoch: int, epochs: int, where: str = "") -> str:
    """The RESUME line every entrypoint logs after restoring the checkpoint of ``last_epoch``."""
    todo = f"continuing at epoch {last_epoch + 1}/{epochs}" if last_epoch < epochs else "nothing left to train"
    return f"RESUME: loaded the checkpoint of epoch {last_epoch}; {todo}{f' ({where})' if where else ''}"


# One epoch's training and validation, given the epoch number (1-based).
OneEpoch = Callable[[int], tuple[EpochStats, EpochStats]]
# Called after each epoch with its number and metrics (already appended to the history): checkpoint/report.
AfterEpoch = Callable[[int, dict], None]


def run_epochs(
    first: int, epochs: int, history: list[dict], one_epoch: OneEpoch, after_epoch: AfterEpoch,
    log: Callable[[str], None] | None, precision: str | None = None,
) -> dict:
    """Epochs ``first``..``epochs``: time each, append its metrics to ``history`` (with the ``precision`` it trained
    in, where given), log its line (``log`` is None on ranks that stay quiet), then hand it to ``after_epoch``.
    Returns the last metrics."""
    metrics: dict = {}
    for epoch in range(first, epochs + 1):
        step_rows.meter().epoch_begins(epoch)
        start = time.perf_counter()
        train_stats, val_stats = one_epoch(epoch)
        seconds = time.perf_counter() - start
        metrics = {contract.METRIC_EPOCH: epoch, contract.METRIC_EPOCH_TIME: seconds, **train_stats.as_dict("train_"),
                   **val_stats.as_dict("val_")}
        if precision is not None:
            metrics[contract.METRIC_PRECISION] = precision
        history.append(metrics)
        if log is not None:
            log(format_epoch_line(epoch, epochs, train_stats, val_stats, seconds))
        after_epoch(epoch, metrics)
    return metrics
