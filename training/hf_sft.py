"""Supervised fine-tuning of a Hugging Face causal LM on Ray Train: ``python -m training.hf_sft [flags]``.

``--model`` is a hub id, a local ``save_pretrained`` folder, an ``s3://`` folder (copied once per node), or
``tiny:qwen3`` / ``tiny:llama`` (a tiny random-init model of that architecture and an offline byte-level
tokenizer, for tests and CPU clusters). ``--data`` is a folder (local or ``s3://``) with ``train.parquet`` and
``val.parquet`` (string columns ``prompt``, ``completion``; optional ``added_tokens.json``); default
``$RTJOB_INPUT_URI/sft`` in a pipeline, else the built-in generated set. The loss covers completion tokens only.

Each worker trains with real DDP (``prepare_model``) or, with ``--fsdp``, FSDP2 (``fully_shard`` per decoder
layer, then the root); ``--lora-r N`` trains a peft LoRA adapter instead of all weights. Rank 0 checkpoints
every epoch (``training.hf.checkpoint``: a ``from_pretrained``-loadable folder); a restarted run resumes.

Sizing on AWS g5 (A10G, 24 GB each): g5.4xlarge = 1 GPU, g5.12xlarge = 4 GPUs. A full fine-tune of Qwen3-1.7B
with AdamW holds fp32 weights + gradients + two Adam moments, 16 bytes a parameter: about 27 GB before
activations, more than one A10G. So either ``--fsdp`` across the 4 GPUs of a g5.12xlarge (about 7 GB of states per
GPU, plus activations) or ``--lora-r 16`` on one A10G (bf16 autocast over fp32 base weights: about 7 GB of
weights, the adapter's states are tiny). Use ``--precision bf16`` on A10G (Ampere has bf16).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import rtjob_contract as contract

from . import options

CONFIG_KEYS = ("epochs", "global_batch_size", "grad_accum", "lr", "weight_decay", "max_grad_norm", "model", "data",
               "train_size", "val_size", "max_len", "seed", "precision", "fsdp", "lora_r", "lora_alpha",
               "lora_dropout", "train_log_level")


def default_data() -> str:
    """The previous pipeline step's ``sft/`` folder when there is one, else the built-in set."""
    from .hf.data import BUILTIN

    input_uri = os.environ.get(contract.ENV_INPUT_URI)
    return f"{input_uri.rstrip('/')}/sft" if input_uri else BUILTIN


def add_sft_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fine-tuning")
    group.add_argument("--model", required=True,
                       help="hub id, local folder, s3:// folder, or tiny:qwen3 / tiny:llama (random-init, offline)")
    group.add_argument("--data", default=default_data(),
                       help="folder (local or s3://) with train.parquet and val.parquet (prompt, completion) "
                       "[+ added_tokens.json]; 'builtin' = a generated offline set "
                       "(default: $RTJOB_INPUT_URI/sft if set, else builtin)")
    group.add_argument("--epochs", type=options.positive_int, default=2)
    group.add_argument("--global-batch-size", type=options.positive_int, default=16,
                       help="sequences per optimizer step over all workers and accumulation steps")
    group.add_argument("--grad-accum", type=options.positive_int, default=1,
                       help="micro-batches per optimizer step (gradient accumulation)")
    group.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (constant)")
    group.add_argument("--weight-decay", type=float, default=0.0)
    group.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (0: off)")
    group.add_argument("--max-len", type=options.positive_int, default=512, help="tokens per example (cut beyond)")
    group.add_argument("--train-size", type=options.positive_int, help="use the first N training examples")
    group.add_argument("--val-size", type=options.positive_int, help="use the first N validation examples")
    group.add_argument("--seed", type=int, default=0)
    options.add_precision_arg(group)
    group.add_argument("--fsdp", action="store_true", help="FSDP2: shard each decoder layer, then the root")
    group.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: full fine-tune)")
    group.add_argument("--lora-alpha", type=float, help="LoRA alpha (default 2 x rank)")
    group.add_argument("--lora-dropout", type=float, default=0.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.hf_sft",
                                     description="Causal-LM supervised fine-tuning on Ray Train (DDP or FSDP2, LoRA)")
    args = options.parse_ray_entrypoint(parser, add_sft_args, argv)
    if args.lora_r < 0:
        parser.error(f"--lora-r must be >= 0, got {args.lora_r}")
    if args.lora_r and args.fsdp:
        parser.error("--lora-r with --fsdp is not supported: a LoRA run's trainable state is small, use DDP")
    if args.model.startswith("tiny:"):
        from .hf.model import TINY_ARCHS, TINY_PREFIX

        if args.model[len(TINY_PREFIX):] not in TINY_ARCHS:
            parser.error(f"--model {args.model}: unknown tiny model; choose "
                         + " or ".join(TINY_PREFIX + a for a in TINY_ARCHS))
    args.storage_path = options.resolve_storage_path(args.storage_path)
    args.run_name = args.run_name or f"rtjob-hf-sft-{time.strftime('%Y%m%d-%H%M%S')}"
    args.dataset = args.data  # what ray_ddp.fit prints
    return args


def main(argv: list[str] | None = None) -> int:
    from . import ray_ddp

    args = parse_args(argv)
    print(f"STRATEGY: {'fsdp2' if args.fsdp else 'ddp'}{f' + LoRA r={args.lora_r}' if args.lora_r else ''}, "
          f"precision {args.precision}, grad-accum {args.grad_accum}", flush=True)
    # By reference (not a copy in __main__ under `python -m`): workers import it from the working dir.
    loop_fn = importlib.import_module(f"{__package__}.hf.worker").train_loop_per_worker
    return ray_ddp.fit(args, ray_ddp.build_trainer(args, loop_fn, config_keys=CONFIG_KEYS))


if __name__ == "__main__":
    sys.exit(main())
