"""Command-line flags shared by the training entrypoints.

Entrypoints are configured only by flags and ``RTJOB_*`` environment variables (a job
submitter sets the latter), never by importing the CLI. Environment variables supply
defaults; an explicit flag wins.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TypeVar

import rtjob_contract as contract

from . import precision, step_rows
from .choices import DATASETS, DEFAULT_VIT_SIZE, MODEL_NAMES, VIT_SIZES

_N = TypeVar("_N", int, float)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_int(name: str, default: int) -> int:
    return _env_number(name, default, int)


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float)


def _env_number(name: str, default: _N, kind: Callable[[str], _N]) -> _N:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a valid {kind.__name__}") from None


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{name}={value!r} is not a boolean; use 1 or 0")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_training_args(parser: argparse.ArgumentParser) -> None:
    """Model, data and optimiser flags (the same for every parallelism strategy)."""
    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=positive_int, default=2)
    group.add_argument(
        "--global-batch-size", type=positive_int, default=128,
        help="samples per optimizer step over all workers (split evenly between them)",
    )
    group.add_argument("--lr", type=float, default=0.001, help="Adam learning rate")
    group.add_argument("--model", choices=sorted(MODEL_NAMES), default="resnet18")
    group.add_argument(
        "--vit-size", choices=list(VIT_SIZES), default=DEFAULT_VIT_SIZE,
        help="ViT size for --model vit: tiny (0.08M params), small (1.8M), base (14.3M, the "
        "workshop's CIFAR-10 ViT), large (85M)",
    )
    group.add_argument(
        "--dataset", choices=DATASETS, default="mnist",
        help="mnist / fashionmnist / cifar10 download the real dataset (needs internet once per "
        "node); synthetic (1x28x28 digit-like) and synthetic-cifar10 (3x32x32) are generated offline",
    )
    group.add_argument(
        "--data-dir", default=os.environ.get(contract.ENV_DATA_DIR),
        help="MNIST download dir, shared by the workers of a node "
        "(env RTJOB_DATA_DIR, else ~/.cache/rtjob/data on each worker)",
    )
    group.add_argument("--train-size", type=positive_int, help="limit the training set (default: all / synthetic 2048)")
    group.add_argument("--val-size", type=positive_int, help="limit the validation set (default: all / synthetic 512)")
    group.add_argument("--seed", type=int, default=0)
    precision.add_precision_arg(group)
    group.add_argument(
        "--compile", action="store_true",
        help="torch.compile the model (off by default: on an H200 it cost 29-34 s before the first step and gained "
        "34-40%% steady speed on ViT, so it pays on long runs; benchmarks/gpu-results.md)",
    )


def add_ray_args(parser: argparse.ArgumentParser) -> None:
    """Scaling and run-storage flags for entrypoints that run on Ray Train."""
    group = parser.add_argument_group("ray")
    group.add_argument(
        "--num-workers", type=positive_int, default=env_int(contract.ENV_NUM_WORKERS, 2),
        help="training workers (env RTJOB_NUM_WORKERS, default 2)",
    )
    group.add_argument(
        "--use-gpu", action=argparse.BooleanOptionalAction, default=env_bool(contract.ENV_USE_GPU, False),
        help="one GPU per worker (env RTJOB_USE_GPU=1/0, default off)",
    )
    group.add_argument(
        "--cpus-per-worker", type=float, default=env_float(contract.ENV_CPUS_PER_WORKER, 1.0),
        help="CPUs reserved per worker (env RTJOB_CPUS_PER_WORKER, default 1)",
    )
    group.add_argument(
        "--storage-path", default=os.environ.get(contract.ENV_STORAGE_PATH),
        help="local dir or URI (s3://...) for checkpoints and results; must be shared "
        "storage on multi-node clusters (env RTJOB_STORAGE_PATH, default ~/ray_results)",
    )
    group.add_argument(
        "--run-name", default=os.environ.get(contract.ENV_RUN_NAME),
        help="run folder under the storage path; reuse it to resume (env RTJOB_RUN_NAME)",
    )
    group.add_argument(
        "--max-failures", type=int, default=env_int(contract.ENV_MAX_FAILURES, 0),
        help="worker-group restarts from the latest checkpoint (env RTJOB_MAX_FAILURES, "
        "default 0, -1 = unlimited)",
    )
    group.add_argument(
        "--keep-checkpoints", type=positive_int, default=3,
        help="most recent checkpoints kept in storage",
    )
    group.add_argument(
        "--train-log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="WARNING",
        help="level of Ray Train's own log lines (its INFO level repeats every reported metric)",
    )
    step_rows.add_arg(group)


def add_file_run_args(group: argparse._ArgumentGroup, run_name_help: str = "") -> None:
    """Run-storage flags of the entrypoints that checkpoint without Ray Train (``training.file_checkpoint``)."""
    group.add_argument(
        "--storage-path", default=os.environ.get(contract.ENV_STORAGE_PATH) or "~/ray_results",
        help="local dir or URI (s3://...) for checkpoints; shared storage across nodes "
        "(env RTJOB_STORAGE_PATH, default ~/ray_results)",
    )
    group.add_argument(
        "--run-name", default=os.environ.get(contract.ENV_RUN_NAME),
        help=f"run folder under the storage path; reuse it to resume (env RTJOB_RUN_NAME{run_name_help})",
    )
    group.add_argument("--keep-checkpoints", type=positive_int, default=3, help="most recent checkpoints kept")
    step_rows.add_arg(group)


def resolve_storage_path(path: str | None) -> str | None:
    """Ray needs an absolute local path; URIs (s3://, gs://, ...) pass through unchanged."""
    if path is None or "://" in path:
        return path
    return os.path.abspath(os.path.expanduser(path))


PRECISIONS = precision.PRECISIONS
add_precision_arg = precision.add_precision_arg


def parse_ray_entrypoint(parser: argparse.ArgumentParser, add_args: Callable[[argparse.ArgumentParser], None],
                         argv: list[str] | None) -> argparse.Namespace:
    """The flags of a Ray Train entrypoint: its own (``add_args``), then the ray group. A ``--precision`` left unset
    is bf16 with a GPU and fp32 without; fp16 without a GPU is a usage error (GradScaler needs CUDA)."""
    try:  # defaults come from RTJOB_* variables: a bad value is a usage error, not a crash
        add_args(parser)
        add_ray_args(parser)
    except ValueError as exc:
        parser.error(str(exc))
    args = parser.parse_args(argv)
    if hasattr(args, "precision"):
        precision.resolve_arg(parser, args)
    return args
