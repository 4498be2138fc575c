"""The numeric precision of a training run: one rule for every entrypoint (``--precision bf16|fp16|fp32``).

- ``bf16``: autocast to bfloat16 (CPU and GPU); weights, gradients and the optimizer stay fp32. The default with a
  GPU; on a GPU without bf16 (before Ampere) the worker falls back to fp32 and says so in one line.
- ``fp16``: autocast to float16 with a ``torch.amp.GradScaler`` (GPU only); the scaler's state is checkpointed
  beside the optimizer's (``checkpoint.save_optimizer``), so a resumed run keeps the loss scale it had found.
- ``fp32``: no autocast. The default on CPU. On a GPU of compute capability 8.0+ (Ampere and newer) matmuls and
  convolutions use TF32 tensor cores (``torch.backends.*.allow_tf32``): fp32 storage, a 10-bit mantissa product.

Torch is imported by the functions that need it, so the flag rule can be used by a parser without torch loaded.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PRECISIONS = ("bf16", "fp16", "fp32")
FP16_NEEDS_GPU = "--precision fp16 needs a GPU (float16 autocast + GradScaler); use bf16 or fp32 on CPU"


def add_precision_arg(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    group.add_argument("--precision", choices=PRECISIONS,
                       help="bf16 (autocast; default with --use-gpu), fp16 (autocast + GradScaler, GPU only) or "
                       "fp32 (default on CPU; TF32 matmuls on Ampere and newer GPUs)")


def default_for(use_gpu: bool) -> str:
    return "bf16" if use_gpu else "fp32"


def resolve_arg(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.precision`` left unset becomes the device's default; fp16 without a GPU is a usage error."""
    args.precision = args.precision or default_for(bool(args.use_gpu))
    if args.precision == "fp16" and not args.use_gpu:
        parser.error(FP16_NEEDS_GPU)


def check(precision: str, device_type: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and device_type != "cuda":
        raise ValueError(FP16_NEEDS_GPU)


def for_device(precision: str, device: torch.device) -> tuple[str, str]:
    """``(precision to train in, its PRECISION: line)`` on ``device``, after setting the process's matmul modes.

    bf16 on a GPU without bf16 becomes fp32 (the line says so); fp32 on Ampere or newer turns TF32 on."""
    import torch

    check(precision, device.type)
    note = ""
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        precision, note = "fp32", f" (bf16 is not supported on {torch.cuda.get_device_name(device)}: fp32 instead)"
    tf32 = precision == "fp32" and device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    how = {"bf16": "bfloat16 autocast, fp32 weights", "fp16": "float16 autocast + GradScaler, fp32 weights",
           "fp32": "TF32 matmuls" if tf32 else "full fp32"}[precision]
    return precision, f"PRECISION: {precision} ({how}) on {device.type}{note}"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 (None otherwise): it scales the loss up so small float16 gradients don't underflow."""
    import torch

    check(precision, device.type)
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def maybe_compile(model: torch.nn.Module, compile_model: bool) -> torch.nn.Module:
    """``torch.compile(model)`` when asked (``--compile``); the compiled module shares the model's parameters, so
    the optimizer, DDP and checkpoints see the same tensors (save ``model``'s state dict, not the wrapper's)."""
    if not compile_model:
        return model
    import torch

    return torch.compile(model)  # type: ignore[return-value]
