"""Step rows while a run trains: rank 0 prints one every ``--log-every-steps`` optimizer steps as an event line,
``rtjob-event: step_row {"step", "time", "epoch", "loss", "lr", "samples_per_s", "gpu_mem_mb"}``
(rtjob_contract.EVENT_STEP_ROW), which the run's companion appends to metrics.jsonl in RTJOB_RUN_DIR.

One meter per process, configured by the entrypoint (``configure``); the shared loops call ``epoch_begins`` /
``epoch_length`` / ``step_done``. Between rows nothing leaves the device: the loss is summed there and read once per
row (one host sync every N steps). ``loss``: the mean of rank 0's batch losses since the last row; ``samples_per_s``:
rank 0's samples × world size over the wall time since the last row; ``gpu_mem_mb``: the device's peak allocated
memory this epoch (CUDA only)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import rtjob_contract as contract

from . import events

DEFAULT_EVERY = 10


def add_arg(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    group.add_argument(
        "--log-every-steps", type=int, default=DEFAULT_EVERY, metavar="N",
        help=f"rank 0 reports a step row (loss, lr, samples/s, GPU memory) every N optimizer steps for the live "
        f"charts (default {DEFAULT_EVERY}; 0: none)",
    )


class StepMeter:
    def __init__(self, every: int, rank: int | None = None, world_size: int | None = None,
                 trial: str | None = None) -> None:
        self.every = max(0, int(every or 0))
        self.trial = trial  # a sweep's trial: its rows name it (contract.STEP_TRIAL)
        self._rank = rank
        self._world = world_size
        self.step = 0  # optimizer steps done (global: an epoch's first step is (epoch - 1) × its length + 1)
        self.epoch: int | None = None
        self._loss: Any = 0.0  # a device tensor once the first step is counted
        self._steps = 0  # steps since the last row
        self._samples = 0  # rank 0's samples since the last row
        self._since = time.perf_counter()

    def epoch_begins(self, epoch: int) -> None:
        self.epoch = epoch
        self._restart()

    def epoch_length(self, steps: int) -> None:
        """The epoch's optimizer steps, where the loader knows them: the step count is exact after a resume."""
        if self.epoch is not None and steps > 0:
            self.step = (self.epoch - 1) * steps

    def step_done(self, loss: Any, samples: int, device: Any = None, optimizer: Any = None) -> None:
        """An optimizer step on this rank: ``loss`` its batch loss (a tensor or a number), ``samples`` its batch."""
        self.step += 1
        if not self.every or self.rank() != 0:
            return
        self._loss = self._loss + (loss.detach().float() if hasattr(loss, "detach") else float(loss))
        self._steps += 1
        self._samples += samples
        if self.step % self.every == 0:
            events.write_row(contract.EVENT_STEP_ROW, self._row(device, optimizer))
            self._restart()

    def rank(self) -> int:
        if self._rank is None:
            self._rank, self._world = _distributed()
        return self._rank

    def _row(self, device: Any, optimizer: Any) -> dict[str, Any]:
        loss = self._loss.item() if hasattr(self._loss, "item") else self._loss  # the one host sync per row
        seconds = time.perf_counter() - self._since  # after the sync: the steps' real time
        row: dict[str, Any] = {contract.STEP_KEY: self.step, contract.STEP_TIME: round(time.time(), 3)}
        if self.epoch is not None:
            row[contract.METRIC_EPOCH] = self.epoch
        if self.trial:
            row[contract.STEP_TRIAL] = self.trial
        row["loss"] = round(float(loss) / max(self._steps, 1), 6)
        if optimizer is not None and getattr(optimizer, "param_groups", None):
            row["lr"] = float(optimizer.param_groups[0]["lr"])
        if seconds > 0:
            row["samples_per_s"] = round(self._samples * (self._world or 1) / seconds, 2)
        if getattr(device, "type", None) == "cuda":
            import torch

            row["gpu_mem_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        return row

    def _restart(self) -> None:
        self._loss, self._steps, self._samples = 0.0, 0, 0
        self._since = time.perf_counter()


def _distributed() -> tuple[int, int]:
    """(rank, world size): torch.distributed's when it is up, else RANK/WORLD_SIZE, else a single process."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


_meter = StepMeter(0)  # off until an entrypoint configures it


def configure(every: int | None, trial: str | None = None) -> StepMeter:
    """This process's meter: a row every ``every`` steps (0: none; None: the default), naming ``trial`` if given."""
    global _meter
    _meter = StepMeter(DEFAULT_EVERY if every is None else every, trial=trial)
    return _meter


def meter() -> StepMeter:
    return _meter
