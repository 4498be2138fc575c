"""Checkpoints of the SFT run: ``save_pretrained`` folders that are also resumable Ray Train checkpoints.

``checkpoint_epoch_NNNN/`` (one per epoch, in the run's Ray Train storage) holds directly the ``save_pretrained``
files of the model and the tokenizer, so ``AutoModelForCausalLM.from_pretrained(folder)`` and
``AutoTokenizer.from_pretrained(folder)`` load it, plus what resuming needs: ``optimizer.pt`` (DDP, written by
rank 0) or ``sharded/`` (FSDP2: every rank's shards of model and optimizer state, via DCP), ``metrics.json`` (the
whole history) and ``state.json`` (written last).

With LoRA the folder holds the MERGED model (base + adapter folded in: what ``from_pretrained`` serves) and the
adapter alone in ``adapter/`` (peft's ``save_pretrained``), which is what a resumed run loads onto its base model.
Merging works on a copy of the model on rank 0, so saving briefly holds the model twice there.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import ray.train
import torch

from .. import checkpoint, fsdp2

ADAPTER_DIR = "adapter"


def export(model: Any, tokenizer: Any, directory: str, *, state_dict: dict | None = None) -> str:
    """Write the loadable model and its tokenizer into ``directory``; returns what was written ("full model" /
    "merged LoRA model + adapter/"). ``state_dict``: the gathered full weights of a sharded model."""
    model = checkpoint.unwrap(model)
    tokenizer.save_pretrained(directory)
    if hasattr(model, "merge_and_unload"):  # a peft model
        model.save_pretrained(os.path.join(directory, ADAPTER_DIR))
        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(directory)
        del merged
        return f"merged LoRA model + {ADAPTER_DIR}/"
    model.save_pretrained(directory, state_dict=state_dict)
    return "full model"


def save_and_report(metrics: dict, *, model: Any, optimizer: torch.optim.Optimizer, tokenizer: Any, epoch: int,
                    history: list[dict], sharded: bool, scaler: torch.amp.GradScaler | None = None) -> None:
    """Every rank reports ``metrics``; rank 0 attaches the epoch's checkpoint (with FSDP2 every rank attaches its
    shards, and the collective gather of the full weights runs on all ranks first)."""
    context = ray.train.get_context()
    rank = context.get_world_rank()
    name = checkpoint.checkpoint_dir_name(epoch)
    if rank != 0 and not sharded:
        ray.train.report(metrics, checkpoint_dir_name=name)
        return
    with tempfile.TemporaryDirectory(prefix="rtjob-ckpt-") as tmp:
        state: dict[str, Any] = {"epoch": epoch, "written_by_rank": 0, "world_size": context.get_world_size()}
        full = None
        if sharded:
            fsdp2.save_sharded(model, optimizer, os.path.join(tmp, fsdp2.SHARDED_DIR))
            full = fsdp2.full_state_dict(model)
            state["sharded"] = f"{fsdp2.SHARDED_DIR}/"
        if rank == 0:
            state["model"] = export(model, tokenizer, tmp, state_dict=full)
            checkpoint.save_optimizer(tmp, None if sharded else optimizer, scaler)  # sharded: in its shards
            checkpoint.write_run_state(tmp, state, history)
        # Synchronous upload: the temp dir may be removed as soon as report returns.
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp), checkpoint_dir_name=name)


@contextlib.contextmanager
def latest() -> Iterator[str | None]:
    """The local folder of the run's latest reported checkpoint while the block runs, or None."""
    found = ray.train.get_checkpoint()
    if found is None:
        yield None
        return
    with checkpoint.local_copy(found) as path:
        yield path


def restore_optimizer(model: Any, optimizer: torch.optim.Optimizer, path: str, device: torch.device,
                      *, sharded: bool, scaler: torch.amp.GradScaler | None = None) -> tuple[int, list[dict]]:
    """Load the optimizer state (FSDP2: model and optimizer shards) and the fp16 scaler's of checkpoint ``path``;
    returns ``(last finished epoch, history)``."""
    if sharded:
        fsdp2.load_sharded(model, optimizer, os.path.join(path, fsdp2.SHARDED_DIR))
    checkpoint.load_optimizer(path, None if sharded else optimizer, device, scaler)
    return checkpoint.read_run_state(path)
