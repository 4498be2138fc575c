"""DeepSpeed ZeRO inside Ray Train: ``python -m training.deepspeed_ray [flags]`` from the project root.

Ray Train starts the workers and the process group (gloo on CPU, nccl on GPU);
``deepspeed.initialize`` reuses that group and wraps the model and a plain torch Adam in
a ZeRO engine: stage 2 (default) partitions optimizer state and gradients over the
workers; ``--zero-stage 3`` partitions the parameters too. ``--cpu-offload`` moves the
optimizer state (stage 2 and 3) and the parameters (stage 3) to CPU memory. DeepSpeed's
own CPU Adam is not used: it needs a compiled extension; the torch optimizer runs with
``"zero_allow_untested_optimizer": true``.

Checkpoints (every epoch, into the run's Ray Train storage): ``engine.save_checkpoint``
on every rank (each writes its ZeRO partition, rank 0 also the model states and
``latest``) into ``deepspeed/``, plus ``model.pt``, the full model state dict for the
plain model (stage 3: gathered from all ranks first). A run restarted with the same
storage path and run name loads model and optimizer through ``engine.load_checkpoint``
and continues at the next epoch.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

DEEPSPEED_DIR = "deepspeed"


def deepspeed_config(
    *, micro_batch: int, world_size: int, zero_stage: int = 2, cpu_offload: bool = False, precision: str = "fp32",
) -> dict:
    """The engine's config: one optimizer step per micro batch, ZeRO ``zero_stage``, ``precision`` (the run's
    ``--precision``, training/precision.py): bf16 = DeepSpeed's torch autocast to bfloat16 over fp32 weights (as the
    other strategies train), fp16 = DeepSpeed's fp16 mode (half weights, fp32 master copy, its own dynamic loss
    scale, kept in its checkpoints) with the inputs cast to half."""
    zero: dict = {"stage": zero_stage}
    if cpu_offload:
        zero["offload_optimizer"] = {"device": "cpu"}
        if zero_stage == 3:
            zero["offload_param"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "train_batch_size": micro_batch * world_size,
        "zero_optimization": zero,
        # DeepSpeed 0.19 clips the gradient norm to 1.0 unless told otherwise; the other strategies
        # (and the workshop) do not clip, so neither does this: the same Adam on the same gradients.
        "gradient_clipping": 0.0,
        # A torch optimizer (not DeepSpeed's compiled CPU Adam / fused Adam) ...
        "zero_allow_untested_optimizer": True,
        # ... also when the optimizer state is offloaded.
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,  # the loop logs its own epoch lines
        **_precision_config(precision),
    }


def _precision_config(precision: str) -> dict:
    if precision == "bf16":
        return {"torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    if precision == "fp16":
        return {"fp16": {"enabled": True, "auto_cast": True}}
    return {}


def initialize(model: nn.Module, lr: float, config: dict) -> tuple[Any, torch.optim.Optimizer]:
    """``deepspeed.initialize`` over the existing process group: ``(engine, optimizer)``."""
    import deepspeed

    deepspeed.utils.logger.setLevel(logging.WARNING)  # its INFO lines repeat the whole config
    if deepspeed.get_accelerator().device_name() == "cpu":
        # Plain gloo collectives: DeepSpeed's shared-memory all-reduce op would be compiled
        # with a C++ toolchain on first use (~60 s here) and only helps ranks on one host.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    # DeepSpeed ZeRO calls c10d collectives that torch 2.14 deprecates, a warning per call.
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed.c10d_logger")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    engine, ds_optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine, ds_optimizer


def full_state_dict(engine: Any, zero_stage: int) -> dict[str, torch.Tensor] | None:
    """The plain model's state dict on rank 0, None elsewhere; a collective under ZeRO-3."""
    if zero_stage == 3:
        state = engine._zero3_consolidated_16bit_state_dict()  # gathers partitions; rank 0 gets them
    else:  # stages 0-2 keep full parameters on every rank
        state = engine.module.state_dict() if dist.get_rank() == 0 else None
    if dist.get_rank() != 0 or state is None:
        return None
    return {key: value.detach().float().cpu().clone() for key, value in state.items()}


def save_checkpoint(engine: Any, directory: str, epoch: int) -> str:
    """Collective: each rank writes its part under ``directory/epoch_NNNN``; returns the tag."""
    tag = f"epoch_{epoch:04d}"
    os.makedirs(os.path.join(directory, tag), exist_ok=True)  # rank 0 alone would create it
    engine.save_checkpoint(directory, tag=tag)
    return tag


def load_checkpoint(engine: Any, directory: str) -> None:
    """Collective: load model and optimizer state from the tag that ``latest`` names."""
    path, _ = engine.load_checkpoint(directory, load_optimizer_states=True, load_lr_scheduler_states=False)
    if path is None:
        raise RuntimeError(f"no DeepSpeed checkpoint in {directory}")


class DeepSpeedStrategy:
    """The DeepSpeed strategy for ``training.sharded.train_loop``."""

    def __init__(self, model: nn.Module, config: dict, device: torch.device) -> None:
        world_size = dist.get_world_size()
        micro_batch = max(1, config["global_batch_size"] // world_size)
        self.zero_stage = config["zero_stage"]
        ds_config = deepspeed_config(
            micro_batch=micro_batch, world_size=world_size, zero_stage=self.zero_stage,
            cpu_offload=config["cpu_offload"], precision=config["precision"],
        )
        self.module, self.optimizer = initialize(model, config["lr"], ds_config)
        self.name = f"deepspeed-zero{self.zero_stage}"
        offload = ", CPU offload" if config["cpu_offload"] else ""
        self.summary = f"DeepSpeed ZeRO-{self.zero_stage} over {world_size} ranks{offload}, {config['precision']}"

    def step(self, loss: torch.Tensor) -> None:
        self.module.backward(loss)
        self.module.step()

    def save(self, directory: str, epoch: int) -> dict:
        tag = save_checkpoint(self.module, os.path.join(directory, DEEPSPEED_DIR), epoch)
        return {"deepspeed": f"{DEEPSPEED_DIR}/", "tag": tag, "zero_stage": self.zero_stage}

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        return full_state_dict(self.module, self.zero_stage)

    def load(self, directory: str) -> None:
        load_checkpoint(self.module, os.path.join(directory, DEEPSPEED_DIR))


# --- entrypoint ----------------------------------------------------------------------------


def train_loop_per_worker(config: dict) -> None:
    from . import sharded

    sharded.train_loop(config, DeepSpeedStrategy)


def add_deepspeed_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("deepspeed")
    group.add_argument(
        "--zero-stage", type=int, choices=[2, 3], default=2,
        help="2: partition optimizer state and gradients (default); 3: parameters too",
    )
    group.add_argument(
        "--cpu-offload", action="store_true",
        help="optimizer state (and with --zero-stage 3 the parameters) in CPU memory",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from . import ray_ddp

    return ray_ddp.parse_args(
        argv, prog=f"python -m {__package__}.deepspeed_ray", kind="deepspeed", add_strategy_args=add_deepspeed_args,
        compiles=False,
        description="DeepSpeed ZeRO-2/3 inside Ray Train, with DeepSpeed checkpoints and resume",
    )


def main(argv: list[str] | None = None) -> int:
    from . import ray_ddp

    args = parse_args(argv)
    offload = " + CPU offload" if args.cpu_offload else ""
    print(f"STRATEGY: deepspeed ZeRO-{args.zero_stage}{offload}", flush=True)
    extra = {"zero_stage": args.zero_stage, "cpu_offload": args.cpu_offload}
    # By reference (not the copy in __main__ under `python -m`): workers import it from the working dir.
    loop_fn = importlib.import_module(f"{__package__}.deepspeed_ray").train_loop_per_worker
    return ray_ddp.fit(args, ray_ddp.build_trainer(args, loop_fn, extra))


if __name__ == "__main__":
    sys.exit(main())
