"""FSDP2 inside Ray Train: ``python -m training.fsdp2 [flags]`` from the project root.

Each worker shards the model with ``torch.distributed.fsdp.fully_shard``: every
transformer block (a ViT's encoder blocks; a ResNet's residual blocks), then the root, on
a 1-D device mesh over all workers (gloo on CPU, nccl on GPU). Ray's
``prepare_model(parallel_strategy="fsdp")`` is not used: it refuses to run without a GPU
and wraps with FSDP1, which has none of the options below.

Options: ``--precision bf16`` (the default with a GPU; training/precision.py) trains with bf16 parameters for
compute and fp32 gradient reduction (the sharded master weights and the optimizer stay fp32), ``fp16`` the same
in float16 with a GradScaler (checkpointed), ``fp32`` without a cast (the old ``--mixed-precision`` is refused
with a line naming ``--precision bf16``); ``--cpu-offload``
keeps sharded parameters, gradients and optimizer state in CPU memory; ``--no-reshard``
keeps the gathered parameters from forward to backward (less communication, more memory).

Checkpoints (every epoch, into the run's Ray Train storage): the sharded model and
optimizer state via ``torch.distributed.checkpoint`` from every rank (``sharded/``), plus
``model.pt``, the full state dict gathered by all ranks and written by rank 0, which
loads into the plain, unsharded model. A run restarted with the same storage path and run
name restores model and optimizer from ``sharded/`` and continues at the next epoch.

The sharding and checkpoint functions here need no Ray (tests call them under plain
``torch.distributed``); Ray is imported by the entrypoint only.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from . import loop, precision

SHARDED_DIR = "sharded"


@dataclass(frozen=True)
class FSDPOptions:
    precision: str = "fp32"  # bf16/fp16: params cast for forward/backward, fp32 gradient reduction
    cpu_offload: bool = False
    reshard_after_forward: bool = True

    def describe(self) -> str:
        parts = [f"{self.precision} params + fp32 reduce" if self.precision != "fp32" else "fp32",
                 "CPU offload" if self.cpu_offload else "no offload",
                 "reshard after forward" if self.reshard_after_forward else "no reshard after forward"]
        return ", ".join(parts)


def sharding_units(model: nn.Module) -> list[nn.Module]:
    """The submodules sharded one by one before the root: a unit's parameters are gathered together."""
    encoder = getattr(model, "encoder", None)
    if encoder is not None and hasattr(encoder, "layers"):  # torchvision ViT
        return list(encoder.layers.children())
    if all(hasattr(model, f"layer{i}") for i in range(1, 5)):  # torchvision ResNet
        return [block for i in range(1, 5) for block in getattr(model, f"layer{i}").children()]
    return []


def shard_model(
    model: nn.Module, device: torch.device, options: FSDPOptions = FSDPOptions(), units: list[nn.Module] | None = None,
) -> nn.Module:
    """Shard ``model`` in place over all ranks of the default process group; returns it (now an FSDPModule).

    ``units``: the submodules to shard before the root (default: ``sharding_units(model)``)."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs: dict = {"mesh": mesh, "reshard_after_forward": options.reshard_after_forward}
    if options.precision != "fp32":
        param_dtype = torch.bfloat16 if options.precision == "bf16" else torch.float16
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if options.cpu_offload:
        # Pinned memory needs CUDA; on a CPU-only machine the shards simply stay in (pageable) RAM.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    for unit in sharding_units(model) if units is None else units:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    assert isinstance(model, FSDPModule)
    return model


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str) -> None:
    """Collective: every rank writes its shards of model and optimizer state (DCP) into ``directory``.

    ``directory`` may differ per rank (each rank's own temporary folder, merged later by
    Ray Train's upload): DCP names files by rank, and rank 0 writes ``.metadata``.
    """
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=directory)


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str) -> None:
    """Collective: restore model and optimizer state saved by ``save_sharded`` (resharded if needed)."""
    model_state, optim_state = get_state_dict(model, optimizer)  # the layout to load into
    state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def full_state_dict(model: nn.Module) -> dict[str, Any] | None:
    """Collective (every rank calls it): the unsharded fp32 state dict on rank 0, None elsewhere.

    It loads into the plain model: ``build_model(...).load_state_dict(sd)``.
    """
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return state if dist.get_rank() == 0 else None


class FSDP2Strategy:
    """The FSDP2 strategy for ``training.sharded.train_loop``: Adam over the sharded parameters."""

    name = "fsdp2"

    def __init__(self, model: nn.Module, config: dict, device: torch.device) -> None:
        self.options = FSDPOptions(
            precision=config["precision"], cpu_offload=config["cpu_offload"],
            reshard_after_forward=not config["no_reshard"],
        )
        self.device = device
        self.module: nn.Module = shard_model(model, device, self.options)
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=config["lr"])
        self.scaler = precision.grad_scaler(self.options.precision, device)
        self.step = loop.optimizer_step(self.optimizer, self.scaler)
        self.summary = f"FSDP2 over {dist.get_world_size()} ranks ({self.options.describe()})"

    def save(self, directory: str, epoch: int) -> dict:
        from . import checkpoint  # Ray Train's side: the sharding functions above need no Ray

        save_sharded(self.module, self.optimizer, os.path.join(directory, SHARDED_DIR))
        if dist.get_rank() == 0:
            checkpoint.save_optimizer(directory, None, self.scaler)  # fp16: the loss scale (one for all ranks)
        return {"sharded": f"{SHARDED_DIR}/", "fsdp": asdict(self.options)}

    def full_state_dict(self) -> dict[str, Any] | None:
        return full_state_dict(self.module)

    def load(self, directory: str) -> None:
        from . import checkpoint

        load_sharded(self.module, self.optimizer, os.path.join(directory, SHARDED_DIR))
        checkpoint.load_optimizer(directory, None, self.device, self.scaler)


# --- entrypoint ----------------------------------------------------------------------------


def train_loop_per_worker(config: dict) -> None:
    from . import sharded

    sharded.train_loop(config, FSDP2Strategy)


class _Replaced(argparse.Action):
    """The flag ``--mixed-precision`` (bf16 parameters) became ``--precision bf16``, one flag for every entrypoint."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.error("--mixed-precision was replaced by --precision bf16 (bf16 parameters, fp32 gradient "
                     "reduction); in a job's args: precision: bf16")


def add_fsdp_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fsdp2")
    group.add_argument("--mixed-precision", action=_Replaced, nargs=0, help=argparse.SUPPRESS)
    group.add_argument(
        "--cpu-offload", action="store_true",
        help="keep sharded parameters, gradients and optimizer state in CPU memory (CPUOffloadPolicy)",
    )
    group.add_argument(
        "--no-reshard", action="store_true",
        help="keep gathered parameters from forward to backward (reshard_after_forward=False)",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from . import ray_ddp

    return ray_ddp.parse_args(
        argv, prog=f"python -m {__package__}.fsdp2", kind="fsdp2", add_strategy_args=add_fsdp_args, compiles=False,
        description="FSDP2 (fully_shard per block) inside Ray Train, with DCP checkpoints and resume",
    )


def main(argv: list[str] | None = None) -> int:
    from . import ray_ddp

    args = parse_args(argv)
    print(f"STRATEGY: fsdp2 ({FSDPOptions(args.precision, args.cpu_offload, not args.no_reshard).describe()})",
          flush=True)
    extra = {"cpu_offload": args.cpu_offload, "no_reshard": args.no_reshard}
    # By reference (not the copy in __main__ under `python -m`): workers import it from the working dir.
    loop_fn = importlib.import_module(f"{__package__}.fsdp2").train_loop_per_worker
    return ray_ddp.fit(args, ray_ddp.build_trainer(args, loop_fn, extra))


if __name__ == "__main__":
    sys.exit(main())
