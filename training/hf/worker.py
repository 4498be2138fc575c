"""The Ray Train worker of the SFT entrypoint: tokenizer, data, model (DDP or FSDP2, optionally LoRA), epochs.

A resumed worker (same run restarted, or Ray Train's worker-group restart) rebuilds everything from the latest
checkpoint folder: the tokenizer saved there, the model saved there (LoRA: the base model of ``--model`` plus the
saved adapter), the optimizer state, and continues at the next epoch with the one metrics history.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import ray.train
import ray.train.torch
import torch
from torch.utils.data import DataLoader

from .. import data as shared_data
from .. import fsdp2, loop, precision
from ..ray_ddp import set_sampler_epoch, setup_worker
from ..sharded import lockstep_batches
from . import checkpoint, data, model, steps

log = logging.getLogger(__name__)


def with_lora(base: Any, config: dict, adapter_dir: str | None) -> Any:
    """``base`` with a trainable LoRA adapter on every linear layer (a saved one when ``adapter_dir``); input and
    output embeddings train fully when the tokenizer added tokens (their new rows must learn)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(base, adapter_dir, is_trainable=True)
    embeddings = {id(base.get_input_embeddings()), id(base.get_output_embeddings())}
    save = sorted({name.rsplit(".", 1)[-1] for name, module in base.named_modules() if id(module) in embeddings})
    lora = LoraConfig(r=config["lora_r"], lora_alpha=config["lora_alpha"] or 2 * config["lora_r"],
                      lora_dropout=config["lora_dropout"], target_modules="all-linear", task_type="CAUSAL_LM",
                      modules_to_save=save if config["added_tokens"] else None)
    return get_peft_model(base, lora)


def build_model(config: dict, tokenizer: Any, resume_dir: str | None) -> Any:
    """The (unwrapped) model to train: from ``--model`` on a fresh run, from the checkpoint on a resumed one."""
    if config["lora_r"]:
        base = model.load_model(config["model"], tokenizer, seed=config["seed"])
        return with_lora(base, config, None if resume_dir is None else f"{resume_dir}/{checkpoint.ADAPTER_DIR}")
    return model.load_model(resume_dir or config["model"], tokenizer, seed=config["seed"])


def loaders(config: dict, tokenizer: Any, rank: int, world: int) -> tuple[DataLoader, DataLoader, int, list]:
    """``(train loader, this rank's exact val loader, the longest val shard's batch count, val examples)``."""
    train_pairs, val_pairs = data.load_pairs(config["data"], config["train_size"], config["val_size"],
                                             config["seed"])
    encode = functools.partial(data.encode_example, tokenizer, max_len=config["max_len"])
    train_set = [encode(p, c) for p, c in train_pairs]
    val_set = [encode(p, c) for p, c in val_pairs]
    micro = max(1, config["global_batch_size"] // (world * config["grad_accum"]))
    collate = functools.partial(data.collate, pad_id=tokenizer.pad_token_id)
    if rank == 0:
        log.info(data.describe(config["data"], len(train_set), len(val_set)))
        log.info(f"DATA: {world} workers x micro-batch {micro} x grad-accum {config['grad_accum']} = "
                 f"{micro * world * config['grad_accum']} sequences per optimizer step")
    # A DistributedSampler (world > 1) gives every rank the same number of batches; batches are moved by the loop.
    train = ray.train.torch.prepare_data_loader(
        DataLoader(train_set, batch_size=micro, shuffle=True, collate_fn=collate), move_to_device=False)
    val = DataLoader(shared_data.eval_shard(val_set, rank, world), batch_size=micro, collate_fn=collate)
    longest = math.ceil(math.ceil(len(val_set) / world) / micro)
    return train, val, longest, val_set


def train_loop_per_worker(config: dict) -> None:
    setup_worker(config)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    config["precision"], line = precision.for_device(config["precision"], device)  # the one rule (bf16 support)
    if rank == 0:
        log.info(line)
    torch.manual_seed(config["seed"])
    sharded = config["fsdp"]
    scaler = steps.grad_scaler(config["precision"], device)

    with checkpoint.latest() as resume_dir:
        tokenizer = model.load_tokenizer(resume_dir or config["model"], data_dir=_data_dir(config))
        config["added_tokens"] = len(model.read_added_tokens(_data_dir(config)))
        net = build_model(config, tokenizer, resume_dir)
        params = sum(p.numel() for p in net.parameters())
        trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
        if sharded:
            net = fsdp2.shard_model(net, device, units=model.decoder_layers(net))
        else:
            net = ray.train.torch.prepare_model(net)
        optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=config["lr"],
                                      weight_decay=config["weight_decay"])
        last_epoch, history = (0, []) if resume_dir is None else checkpoint.restore_optimizer(
            net, optimizer, resume_dir, device, sharded=sharded, scaler=scaler)
    if rank == 0:
        how = "FSDP2" if sharded else "DDP"
        lora = f", LoRA r={config['lora_r']}" if config["lora_r"] else ""
        log.info(f"MODEL: {config['model']} ({params / 1e6:.2f}M parameters, {trainable / 1e6:.2f}M trainable), "
                 f"{how} over {world} ranks{lora}, precision {config['precision']}, vocabulary {len(tokenizer)}")
        if last_epoch:
            log.info(loop.resume_line(last_epoch, config["epochs"]))

    train_loader, val_loader, val_batches, val_set = loaders(config, tokenizer, rank, world)
    sample = torch.tensor([val_set[0][0]], device=device)

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        set_sampler_epoch(train_loader, epoch)
        train = steps.train_epoch(net, train_loader, optimizer, device, precision=config["precision"],
                                  grad_accum=config["grad_accum"], scaler=scaler,
                                  max_grad_norm=config["max_grad_norm"])
        # A sharded forward is a collective: ranks with a shorter val shard run uncounted forwards to keep step.
        batches = lockstep_batches(val_loader, val_batches, net, sample) if sharded else val_loader
        return train, steps.evaluate(net, batches, device, precision=config["precision"])

    def report(epoch: int, metrics: dict) -> None:
        checkpoint.save_and_report(metrics, model=net, optimizer=optimizer, tokenizer=tokenizer, epoch=epoch,
                                   history=history, sharded=sharded, scaler=scaler)

    loop.run_epochs(last_epoch + 1, config["epochs"], history, one_epoch, report, log.info if rank == 0 else None,
                    config["precision"])


def _data_dir(config: dict) -> str | None:
    return None if config["data"] == data.BUILTIN else config["data"]
