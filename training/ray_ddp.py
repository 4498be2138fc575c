"""Ray Train DDP entrypoint: ``python -m training.ray_ddp [flags]`` from the project root.

The driver turns flags / ``RTJOB_*`` environment variables into a TorchTrainer; each
worker trains a replicated model with DDP (via ``prepare_model``) on its shard of the
data, rank 0 checkpoints every epoch, and a run restarted with the same storage path
and run name resumes at the next epoch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from . import checkpoint, data, events, loop, options, precision, step_rows, system_rows
from .models import model_for

# Worker output goes through logging, not print: Ray Train V2 patches print() in workers
# to write both to stdout and to its logger, so every printed line reached the job log
# twice. Its root logger (INFO, console + train log file) emits each record once.
log = logging.getLogger(__name__)


def setup_worker(config: dict) -> None:
    """What every Ray Train worker loop (DDP, Ray Data, FSDP2, DeepSpeed, Tune trials) does first."""
    # One intra-op thread per worker: several workers share a node's cores, and
    # oversubscription makes CPU training much slower, not faster.
    torch.set_num_threads(1)
    # Ray 2.60 logs every report (the whole metrics dict, from every rank, every epoch) on a logger named by
    # its file path, outside the "ray.train" logger that LoggingConfig sets: hold it to the same level.
    with contextlib.suppress(ImportError):
        from ray.train.v2._internal.execution import context as train_context

        logging.getLogger(train_context.__file__).setLevel(config.get("train_log_level", "WARNING"))
    context = ray.train.get_context()
    events.workers_started(context.get_world_rank())
    step_rows.configure(config.get("log_every_steps"), config.get("trial"))
    if context.get_local_rank() == 0:  # one sampler per node of the run
        system_rows.start_sampler()


def worker_precision(config: dict, device: torch.device, rank: int) -> tuple[str, torch.amp.GradScaler | None]:
    """``(precision, GradScaler or None)`` of this worker on ``device``; rank 0 logs the PRECISION line."""
    amp, line = precision.for_device(config.get("precision") or "fp32", device)
    if rank == 0:
        log.info(line)
    return amp, precision.grad_scaler(amp, device)


def train_loop_per_worker(config: dict) -> None:
    setup_worker(config)
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    torch.manual_seed(config["seed"])  # same initial weights everywhere (DDP broadcasts anyway)
    train_set, val_set, batch_size = worker_data(config, rank, world_size)

    # prepare_data_loader swaps in a DistributedSampler (world_size > 1) and moves batches
    # to the worker's device. Validation gets an exact, unpadded shard per rank instead.
    train_loader = ray.train.torch.prepare_data_loader(
        DataLoader(train_set, batch_size=batch_size, shuffle=True)
    )
    val_loader = ray.train.torch.prepare_data_loader(
        DataLoader(data.eval_shard(val_set, rank, world_size), batch_size=batch_size),
        add_dist_sampler=False,
    )

    replica = replicated_model(config, rank)
    model, optimizer, device, amp = replica.model, replica.optimizer, replica.device, replica.precision

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        set_sampler_epoch(train_loader, epoch)
        return (loop.train_epoch(replica.forward, train_loader, optimizer, device, precision=amp,
                                 scaler=replica.scaler),
                loop.evaluate(replica.forward, val_loader, device, precision=amp))

    def report(epoch: int, metrics: dict) -> None:
        checkpoint.save_and_report(metrics, model=model, optimizer=optimizer, epoch=epoch, history=replica.history,
                                   scaler=replica.scaler)

    loop.run_epochs(replica.last_epoch + 1, config["epochs"], replica.history, one_epoch, report,
                    log.info if rank == 0 else None, amp)


@dataclass
class Replica:
    """A DDP worker's model and what trains it: ``forward`` is ``model`` compiled (``--compile``) or itself."""
    device: torch.device
    model: torch.nn.Module
    forward: torch.nn.Module
    optimizer: torch.optim.Optimizer
    precision: str
    scaler: torch.amp.GradScaler | None
    last_epoch: int  # of the restored checkpoint (0: a fresh run)
    history: list[dict]


def replicated_model(config: dict, rank: int) -> Replica:
    """The DDP-wrapped model, its Adam optimizer, its precision and the restored checkpoint."""
    device = ray.train.torch.get_device()
    amp, scaler = worker_precision(config, device, rank)
    model = ray.train.torch.prepare_model(model_for(config))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    last_epoch, history = checkpoint.restore(model, optimizer, device, scaler)
    if rank == 0 and last_epoch:
        log.info(loop.resume_line(last_epoch, config["epochs"]))
    forward = precision.maybe_compile(model, bool(config.get("compile")))
    return Replica(device, model, forward, optimizer, amp, scaler, last_epoch, history)


def worker_data(config: dict, rank: int, world_size: int) -> tuple[Dataset, Dataset, int]:
    """``(train set, validation set, per-worker batch size)`` of a Ray Train worker; rank 0 logs them."""
    train_set, val_set = data.load_datasets(
        config["dataset"], config["data_dir"], config["train_size"], config["val_size"], config["seed"]
    )
    batch_size = max(1, config["global_batch_size"] // world_size)
    if rank == 0:
        log.info(data.describe(config["dataset"], len(train_set), len(val_set), config["data_dir"]))
        log.info(f"DATA: {world_size} workers x batch {batch_size} per step")
    return train_set, val_set, batch_size


def set_sampler_epoch(loader: DataLoader, epoch: int) -> None:
    # Ray's prepare_data_loader adds a DistributedSampler (world_size > 1) but never
    # calls set_epoch (Ray 2.60 source); without it every epoch repeats one order.
    if isinstance(loader.sampler, DistributedSampler):
        loader.sampler.set_epoch(epoch)


def parse_args(
    argv: list[str] | None = None, *, prog: str = f"python -m {__package__}.ray_ddp",
    description: str = "Ray Train DDP (ResNet18 or ViT; MNIST, FashionMNIST, CIFAR-10 or synthetic data)",
    add_strategy_args: Callable[[argparse.ArgumentParser], None] | None = None, kind: str = "ddp",
    compiles: bool = True,
) -> argparse.Namespace:
    """Flags of a Ray Train entrypoint; other strategies add theirs with ``add_strategy_args`` (``compiles``: whether
    the strategy takes ``--compile``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    try:  # defaults come from RTJOB_* variables: a bad value is a usage error, not a crash
        options.add_training_args(parser)
        options.add_ray_args(parser)
    except ValueError as exc:
        parser.error(str(exc))
    if add_strategy_args is not None:
        add_strategy_args(parser)
    args = parser.parse_args(argv)
    precision.resolve_arg(parser, args)
    if args.compile and not compiles:
        parser.error(f"--compile is not supported with {kind} (torch.compile is wired for the DDP, Ray Data, "
                     "torchrun and single-process entrypoints)")
    args.storage_path = options.resolve_storage_path(args.storage_path)
    args.run_name = args.run_name or f"rtjob-{kind}-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return args


# The flags every worker loop of the image-classification entrypoints reads from its config.
CONFIG_KEYS = ("epochs", "global_batch_size", "lr", "model", "vit_size", "dataset", "data_dir", "train_size",
               "val_size", "seed", "train_log_level", "precision", "compile")


def build_trainer(
    args: argparse.Namespace, train_loop: Callable[[dict], None] = train_loop_per_worker,
    extra_config: dict | None = None, config_keys: tuple[str, ...] = CONFIG_KEYS, **trainer_kwargs: Any,
) -> ray.train.torch.TorchTrainer:
    """A TorchTrainer for ``train_loop`` (other strategies pass theirs, their own config (the flags named by
    ``config_keys``, plus ``extra_config``) and, like Ray Data's ``datasets``/``dataset_config``, more TorchTrainer
    arguments)."""
    config = {key: getattr(args, key) for key in config_keys}
    config["log_every_steps"] = getattr(args, "log_every_steps", step_rows.DEFAULT_EVERY)
    config.update(extra_config or {})
    return ray.train.torch.TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(
            num_workers=args.num_workers,
            use_gpu=args.use_gpu,
            resources_per_worker={"CPU": args.cpus_per_worker},
        ),
        run_config=ray.train.RunConfig(
            name=args.run_name,
            storage_path=args.storage_path,  # None: Ray's default, ~/ray_results
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=args.keep_checkpoints),
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
            logging_config=ray.train.LoggingConfig(log_level=args.train_log_level),
        ),
        **trainer_kwargs,
    )


def failure_summary(error: BaseException) -> str:
    """One line per distinct root cause, instead of a wall of nested worker tracebacks."""
    failures = getattr(error, "worker_failures", None) or {}
    causes: dict[str, list[int]] = {}
    for rank, exc in sorted(failures.items()):
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        causes.setdefault(lines[-1] if lines else type(exc).__name__, []).append(rank)
    if not causes:
        return f"{type(error).__name__}: {' '.join(str(error).split())}"
    return "; ".join(f"rank {','.join(map(str, ranks))}: {cause}" for cause, ranks in causes.items())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return fit(args, build_trainer(args))


def fit(args: argparse.Namespace, trainer: ray.train.torch.TorchTrainer) -> int:
    """Run ``trainer``; print the run, a one-line failure or the result. Returns the exit code."""
    print(f"RUN: name={args.run_name} storage={args.storage_path or '~/ray_results'} "
          f"workers={args.num_workers} use_gpu={args.use_gpu} cpus_per_worker={args.cpus_per_worker} "
          f"model={args.model} dataset={args.dataset} epochs={args.epochs} "
          f"global_batch_size={args.global_batch_size} precision={args.precision}"
          f"{' compile' if getattr(args, 'compile', False) else ''}",
          flush=True)
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as error:
        ray.shutdown()  # flush the workers' forwarded logs first, so ERROR is the last line
        print(f"ERROR: training failed: {failure_summary(error)}", file=sys.stderr, flush=True)
        return 1
    ray.shutdown()
    print(f"RESULT: metrics={json.dumps(result.metrics, sort_keys=True)}", flush=True)
    print(f"RESULT: checkpoint={result.checkpoint.path if result.checkpoint else None}", flush=True)
    print(f"RESULT: run_dir={result.path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
