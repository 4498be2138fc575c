"""Single-process baseline: ``python -m training.single [flags]`` from the project root.

The workshop's step 1: one process, one device, the plain loop (``training.loop``), no
Ray Train and no process group: the figure the distributed strategies are compared with.
It checkpoints every epoch into ``<storage>/<run>/checkpoint_epoch_NNNN`` in the same
layout as the Ray DDP entrypoint (``training.file_checkpoint``), and a run restarted with
the same storage path and run name continues at the next epoch.

Where it runs: in this process, unless ``--use-gpu`` is asked for and this process sees
no GPU (a Ray job's entrypoint runs on the head node, which has none): then the same
function runs as one Ray task holding one GPU, on a GPU node of the cluster.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

import torch

import rtjob_contract as contract

from . import data, file_checkpoint, loop, options, precision, step_rows, system_rows
from .models import model_for


def log(message: str) -> None:
    print(message, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.single",
        description="Single-process baseline (ViT or ResNet18; CIFAR-10, MNIST, FashionMNIST or synthetic)",
    )
    try:  # defaults come from RTJOB_* variables: a bad value is a usage error, not a crash
        options.add_training_args(parser)
        group = parser.add_argument_group("run")
        group.add_argument(
            "--num-workers", type=options.positive_int, default=1,
            help="must be 1: this is the one-process baseline (ddp-vit, fsdp-vit, deepspeed-vit scale out)",
        )
        group.add_argument(
            "--use-gpu", action=argparse.BooleanOptionalAction, default=options.env_bool(contract.ENV_USE_GPU, False),
            help="train on one GPU (env RTJOB_USE_GPU=1/0, default off)",
        )
        group.add_argument(
            "--threads", type=options.positive_int,
            default=options.env_int(contract.ENV_CPUS_PER_WORKER, 0) or None,
            help="intra-op CPU threads (env RTJOB_CPUS_PER_WORKER; default: torch's)",
        )
        options.add_file_run_args(group)
    except ValueError as exc:
        parser.error(str(exc))
    args = parser.parse_args(argv)
    precision.resolve_arg(parser, args)
    if args.num_workers != 1:
        parser.error("--num-workers: the single-process baseline runs exactly 1 worker; "
                     "use training.ray_ddp / training.fsdp2 / training.deepspeed_ray to scale out")
    args.run_name = args.run_name or f"rtjob-single-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return args


def train(config: dict) -> dict:
    """Train in this process; returns the last epoch's metrics (empty if nothing was left to train)."""
    with system_rows.sampling():  # this node's rows (on the driver's node the companion keeps its own instead)
        return _train(config)


def _train(config: dict) -> dict:
    if config["threads"]:
        torch.set_num_threads(config["threads"])
    step_rows.configure(config.get("log_every_steps"))
    device = torch.device("cpu")
    if config["use_gpu"]:
        if not torch.cuda.is_available():
            raise SystemExit("ERROR: --use-gpu but CUDA is not available here")
        device = torch.device("cuda", 0)
    amp, line = precision.for_device(config["precision"], device)
    log(line)
    torch.manual_seed(config["seed"])
    train_set, val_set = data.load_datasets(
        config["dataset"], config["data_dir"], config["train_size"], config["val_size"], config["seed"]
    )
    log(data.describe(config["dataset"], len(train_set), len(val_set), config["data_dir"]))
    batch_size = config["global_batch_size"]
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True)
    val_loader = torch.utils.data.DataLoader(val_set, batch_size=batch_size)

    model = model_for(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    log(f"MODEL: {config['model']} ({params / 1e6:.2f}M parameters), 1 process, device {device.type}, "
        f"batch {batch_size}, {torch.get_num_threads()} CPU threads")
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    scaler = precision.grad_scaler(amp, device)
    forward = precision.maybe_compile(model, config.get("compile", False))  # checkpoints save `model`

    storage = file_checkpoint.RunStorage(config["storage_path"], config["run_name"])
    last_epoch, history, path = file_checkpoint.restore(storage, model, optimizer, device, scaler)
    if last_epoch:
        log(loop.resume_line(last_epoch, config["epochs"], path or ""))

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        return (loop.train_epoch(forward, train_loader, optimizer, device, precision=amp, scaler=scaler),
                loop.evaluate(forward, val_loader, device, precision=amp))

    def save(epoch: int, metrics: dict) -> None:
        file_checkpoint.save(  # prints its own CHECKPOINT line
            storage, model=model, optimizer=optimizer, epoch=epoch, history=history,
            world_size=1, keep=config["keep_checkpoints"], scaler=scaler,
        )

    metrics = loop.run_epochs(last_epoch + 1, config["epochs"], history, one_epoch, save, log, amp)
    return metrics


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = vars(args)
    log(f"RUN: name={args.run_name} storage={args.storage_path} workers=1 use_gpu={args.use_gpu} "
        f"model={args.model} dataset={args.dataset} epochs={args.epochs} global_batch_size={args.global_batch_size} "
        f"precision={args.precision}{' compile' if args.compile else ''}")
    if args.use_gpu and not torch.cuda.is_available():
        # A Ray job's entrypoint runs on the head node: run the same loop on a GPU node instead.
        import ray

        log("RUN: no GPU in this process; running the loop as one Ray task with 1 GPU")
        train_fn = importlib.import_module(f"{__package__}.single").train  # by reference, not __main__'s copy
        remote = ray.remote(num_gpus=1, num_cpus=1, max_retries=0)(train_fn)
        metrics = ray.get(remote.remote(config))
    else:
        metrics = train(config)
    log(f"RESULT: metrics={json.dumps(metrics, sort_keys=True)}")
    log(f"RESULT: run_dir={file_checkpoint.RunStorage(args.storage_path, args.run_name).display}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
