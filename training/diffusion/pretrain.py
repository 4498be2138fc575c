"""Pretrain step (Ray Train): ``python -m training.diffusion.pretrain [flags]``.

Trains a ``UNet2DConditionModel`` from scratch on the preprocess step's latents and text embeddings (``--data``,
default ``$RTJOB_INPUT_URI``: the previous pipeline step's run folder) with a DDPM noise schedule (``epsilon`` or
``v_prediction``), DDP over the workers (``prepare_model``), EMA weights (diffusers' ``EMAModel``), gradient
clipping and ``--precision bf16|fp16|fp32`` (bf16 autocast on CPU and GPU; fp16 autocast + GradScaler on GPU only).
Rank 0 writes a diffusers pipeline folder every epoch (``checkpoint.py``) and, every ``--sample-every`` epochs and
at the last, a grid of samples from fixed prompts and seeds (EMA weights) to ``<run>/samples/epoch_NNNN.png``.
A restarted run (same storage path and run name) or a restarted worker group resumes at the next epoch.

Real sizes (``--unet-size``): ``sd15`` / ``sd2`` are the SD 1.x / 2.x UNets (~860M parameters): on an A10G (24 GB,
g5.4xlarge: one per node; g5.12xlarge: four) use ``--precision bf16`` (Ampere has bf16), 512 px images (64x64
latents), a per-GPU batch of ~4-8 with ``--gradient-checkpointing``, lr 1e-4 and ``--ema-decay 0.9999``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import rtjob_contract as contract

from .. import options

CONFIG_KEYS = ("epochs", "global_batch_size", "lr", "weight_decay", "max_grad_norm", "data", "unet_size",
               "prediction_type", "precision", "ema_decay", "cond_drop", "sample_every", "sample_steps",
               "sample_seeds", "guidance", "prompts", "gradient_checkpointing", "seed", "run_dir", "train_log_level")


def add_pretrain_args(parser: argparse.ArgumentParser) -> None:
    from .components import UNET_SIZES
    from .objective import PREDICTION_TYPES
    from .sampling import DEFAULT_PROMPTS

    group = parser.add_argument_group("pretraining")
    group.add_argument("--data", default=os.environ.get(contract.ENV_INPUT_URI),
                       help="the preprocess step's run folder, local or s3:// (default: $RTJOB_INPUT_URI)")
    group.add_argument("--unet-size", choices=list(UNET_SIZES), default="tiny",
                       help="tiny (0.8M, CPU), small (74M), sd15 / sd2 (the real SD 1.x / 2.x UNets, 860M / 866M)")
    group.add_argument("--prediction-type", choices=PREDICTION_TYPES, default="epsilon")
    options.add_precision_arg(group)
    group.add_argument("--epochs", type=options.positive_int, default=10)
    group.add_argument("--global-batch-size", type=options.positive_int, default=64,
                       help="latents per optimizer step over all workers")
    group.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (constant)")
    group.add_argument("--weight-decay", type=float, default=1e-2)
    group.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (0: off)")
    group.add_argument("--ema-decay", type=float, default=0.9999, help="EMA decay (warmed up from 0)")
    group.add_argument("--cond-drop", type=float, default=0.1,
                       help="probability of training on the empty caption (for classifier-free guidance)")
    group.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward")
    group.add_argument("--sample-every", type=options.positive_int, default=1,
                       help="a sample grid every N epochs (and after the last)")
    group.add_argument("--sample-steps", type=options.positive_int, default=20, help="DDIM steps per sample")
    group.add_argument("--sample-seeds", type=options.positive_int, default=2, help="grid columns (seeds 0..N-1)")
    group.add_argument("--guidance", type=float, default=3.0, help="classifier-free guidance scale of the samples")
    group.add_argument("--prompts", default=" | ".join(DEFAULT_PROMPTS), help="grid rows, separated by '|'")
    group.add_argument("--seed", type=int, default=0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.pretrain",
                                     description="Stable Diffusion UNet pretraining on precomputed latents (Ray Train)")
    args = options.parse_ray_entrypoint(parser, add_pretrain_args, argv)
    if not args.data:
        parser.error("no latents: pass --data (the preprocess step's run folder) or run as a pipeline step "
                     "($RTJOB_INPUT_URI)")
    if not 0 <= args.cond_drop < 1:
        parser.error(f"--cond-drop must be in [0, 1), got {args.cond_drop}")
    args.prompts = [p.strip() for p in args.prompts.split("|") if p.strip()]
    if not args.prompts:
        parser.error("--prompts: give at least one prompt")
    args.storage_path = options.resolve_storage_path(args.storage_path)
    args.run_name = args.run_name or f"rtjob-sd-pretrain-{time.strftime('%Y%m%d-%H%M%S')}"
    storage = args.storage_path or os.path.expanduser("~/ray_results")
    # Samples are written by the rank-0 worker, on any node: the run's storage folder, not the driver's local one.
    args.run_dir = (os.environ.get(contract.ENV_RUN_URI) or os.environ.get(contract.ENV_RUN_DIR)
                    or f"{storage.rstrip('/')}/{args.run_name}")
    args.model, args.dataset = f"unet-{args.unet_size}", args.data  # what ray_ddp.fit prints
    return args


def main(argv: list[str] | None = None) -> int:
    from .. import ray_ddp

    args = parse_args(argv)
    print(f"STRATEGY: ddp, precision {args.precision}, {args.prediction_type} prediction", flush=True)
    # By reference (not a copy in __main__ under `python -m`): workers import it from the working dir.
    loop_fn = importlib.import_module(f"{__package__}.worker").train_loop_per_worker
    return ray_ddp.fit(args, ray_ddp.build_trainer(args, loop_fn, config_keys=CONFIG_KEYS))


if __name__ == "__main__":
    sys.exit(main())
