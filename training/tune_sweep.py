"""A Ray Tune sweep over Ray Train DDP runs: ``python -m training.tune_sweep [flags]``.

Ray Train V2 + Tune, the supported way (Ray 2.60: a ``ray.tune.Tuner`` over a *function*
trainable that builds and fits a ``TorchTrainer``; ``TuneReportCallback`` forwards each
report of rank 0 — metrics and the checkpoint path — to Tune). Each trial is a complete
``training.ray_ddp`` run (same loop, metrics, rank-0 checkpoints, ``max_failures``) with
its own ``--lr`` and ``--global-batch-size`` from the grid (``--lrs``, ``--batch-sizes``).

A trial's driver holds no CPU of its own (the Train controller neither), so on a small
cluster the trials run one after the other (``--max-concurrent-trials``, default 1) with
``--num-workers`` workers each. Layout under the storage path::

    <storage>/<run>/            the Tune experiment (restored when the same run is started again)
    <storage>/<run>/train/<trial>/checkpoint_epoch_NNNN/   each trial's Ray Train run

At the end the best trial (``--metric``/``--mode``, default lowest ``val_loss``) is printed
with its metrics and checkpoint; the exit status is 1 if any trial failed or none reported.
A job retried under the same run name restores the experiment: finished trials are kept,
unfinished or failed ones continue from their last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import ray
from ray import tune

from . import options, ray_ddp

NAME_KEYS = ("lr", "global_batch_size")


def trial_run_name(config: dict) -> str:
    """Deterministic per grid point, so a restored sweep finds each trial's Train run again."""
    return f"trial-lr{config['lr']:g}-bs{config['global_batch_size']}"


def train_driver_fn(config: dict, base: dict) -> None:
    """One trial: a full Ray Train DDP run with this trial's lr and batch size."""
    from ray.tune.integration.ray_train import TuneReportCallback

    args = argparse.Namespace(**base)
    args.run_name = trial_run_name(config)
    args.storage_path = base["train_storage"]
    extra = {**{k: config[k] for k in NAME_KEYS}, "trial": args.run_name}  # its step rows name the trial
    trainer = ray_ddp.build_trainer(args, extra_config=extra)
    # build_trainer owns the RunConfig; the callback is read when fit() starts the controller.
    trainer.run_config.callbacks = [*(trainer.run_config.callbacks or []), TuneReportCallback()]
    trainer.fit()


class TrialLines(tune.Callback):
    """One line per trial result and per finished/failed trial (instead of Tune's status tables)."""

    def __init__(self, metric: str) -> None:
        self.metric = metric

    def _name(self, trial: Any) -> str:
        return trial_run_name(trial.config) if "lr" in (trial.config or {}) else str(trial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        print(f"TRIAL {self._name(trial)}: epoch {result.get('epoch')} {self.metric}={result.get(self.metric)} "
              f"val_accuracy={result.get('val_accuracy')}", flush=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        print(f"TRIAL {self._name(trial)}: finished", flush=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        print(f"TRIAL {self._name(trial)}: FAILED", flush=True)


def add_sweep_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sweep")
    group.add_argument("--lrs", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3], help="lr grid")
    group.add_argument("--batch-sizes", type=options.positive_int, nargs="+",
                       help="global batch size grid (default: --global-batch-size only)")
    group.add_argument("--metric", default="val_loss", help="what picks the best trial (last report)")
    group.add_argument("--mode", choices=["min", "max"], default="min")
    group.add_argument("--max-concurrent-trials", type=options.positive_int, default=1,
                       help="trials at once (each needs --num-workers x --cpus-per-worker CPUs)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = ray_ddp.parse_args(
        argv, prog=f"python -m {__package__}.tune_sweep", kind="tune", add_strategy_args=add_sweep_args,
        description="Ray Tune sweep over lr and batch size of Ray Train DDP runs (ResNet18)",
    )
    args.storage_path = args.storage_path or os.path.expanduser("~/ray_results")  # Tune needs a real folder
    args.batch_sizes = args.batch_sizes or [args.global_batch_size]
    return args


def build_tuner(args: argparse.Namespace) -> tune.Tuner:
    experiment = f"{args.storage_path.rstrip('/')}/{args.run_name}"
    base = {**vars(args), "train_storage": f"{experiment}/train"}
    trainable = tune.with_parameters(train_driver_fn, base=base)
    # The trial's function only drives the Train controller: it must hold no CPU, or a cluster whose
    # CPUs all go to the Train workers never starts them. Tune refuses an all-zero request, so the
    # trial asks for one byte of memory instead (any CPU fraction would block a 1-CPU node's worker).
    trainable = tune.with_resources(trainable, {"CPU": 0, "memory": 1})
    if tune.Tuner.can_restore(experiment):
        print(f"RESUME: restoring the sweep {experiment} (finished trials are kept)", flush=True)
        return tune.Tuner.restore(experiment, trainable=trainable, resume_unfinished=True, resume_errored=True)
    return tune.Tuner(
        trainable,
        param_space={"lr": tune.grid_search(args.lrs), "global_batch_size": tune.grid_search(args.batch_sizes)},
        tune_config=tune.TuneConfig(metric=args.metric, mode=args.mode,
                                    max_concurrent_trials=args.max_concurrent_trials),
        run_config=tune.RunConfig(name=args.run_name, storage_path=args.storage_path, verbose=0,
                                  callbacks=[TrialLines(args.metric)]),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trials = len(args.lrs) * len(args.batch_sizes)
    print(f"RUN: name={args.run_name} storage={args.storage_path} sweep lr={args.lrs} "
          f"global_batch_size={args.batch_sizes} ({trials} trials, {args.max_concurrent_trials} at a time) "
          f"workers={args.num_workers} dataset={args.dataset} epochs={args.epochs} max_failures={args.max_failures} "
          f"precision={args.precision}",
          flush=True)
    # Tune lists its results relative to os.getcwd(): the driver works from a stable folder, not from the
    # runtime_env's copy of the working dir (which Ray may unpack again when a node's first worker starts).
    # Imports still resolve (sys.path holds the absolute path).
    if args.data_dir:
        args.data_dir = os.path.abspath(args.data_dir)
    os.chdir(tempfile.gettempdir())
    ray.init(log_to_driver=True)
    results = build_tuner(args).fit()
    ray.shutdown()
    failed = 0
    for result in results:
        name = trial_run_name(result.config) if "lr" in (result.config or {}) else "?"
        if result.error is not None:
            failed += 1
            lines = [line for line in str(result.error).strip().splitlines() if line.strip()]
            print(f"ERROR: trial {name} failed: {lines[-1][:300] if lines else type(result.error).__name__}",
                  file=sys.stderr, flush=True)
            continue
        metrics = result.metrics or {}
        print(f"TRIAL {name}: {args.metric}={metrics.get(args.metric)} val_accuracy={metrics.get('val_accuracy')} "
              f"epochs={metrics.get('epoch')}", flush=True)
    try:
        best = results.get_best_result(metric=args.metric, mode=args.mode, scope="last")
    except RuntimeError as exc:  # no trial reported the metric
        print(f"ERROR: no best trial: {exc}", file=sys.stderr, flush=True)
        return 1
    metrics = {k: v for k, v in (best.metrics or {}).items() if k.startswith(("train_", "val_", "epoch"))}
    print(f"BEST: trial={trial_run_name(best.config)} lr={best.config['lr']:g} "
          f"global_batch_size={best.config['global_batch_size']} {args.metric}={best.metrics.get(args.metric)}",
          flush=True)
    print(f"BEST: metrics={json.dumps(metrics, sort_keys=True)}", flush=True)
    print(f"BEST: checkpoint={best.metrics.get('checkpoint_path')}", flush=True)
    print(f"RESULT: experiment={best.path.rsplit('/', 1)[0] if best.path else None}", flush=True)
    if failed:
        print(f"ERROR: {failed} of {len(results)} trials failed", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
