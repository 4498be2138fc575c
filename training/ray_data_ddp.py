"""Ray Train DDP fed by Ray Data: ``python -m training.ray_data_ddp [flags]`` from the project root.

Instead of every worker loading the whole dataset and keeping its ``DistributedSampler``
share (``training.ray_ddp``), the driver builds one Ray Dataset and Ray Train streams a
shard of it to each worker (``ray.train.get_dataset_shard``), batched by
``iter_torch_batches``. Sources:

* ``--dataset mnist|synthetic`` (default): the torchvision download (once, on the driver's
  node) or the offline synthetic digits, turned into an in-memory Ray Dataset;
* ``--data-uri URI``: a local path or ``s3://`` location of Parquet files or of an image folder
  (``<class>/<image>.png``; the class folder name is the label). Parquet needs a ``label`` column
  and an ``image`` column holding encoded images (PNG/JPEG bytes, or Hugging Face's
  ``{bytes, path}`` struct) or pixel arrays (uint8 0-255 are normalised like MNIST, floats are
  taken as normalised). If the location has ``train/`` and ``val/`` sub-folders they are the two
  splits; otherwise ``--val-fraction`` of it is held out for validation.

Training shards are equal (every worker runs the same number of steps, as DDP requires);
validation shards are not padded or trimmed, so every validation row is counted exactly once.
Checkpoints, resume and metrics are those of ``training.ray_ddp``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import ray
import ray.train
import ray.train.torch
import torch

from . import checkpoint, data, loop, options, ray_ddp
from .image_rows import IMAGE, LABEL, decode_batch, label_from_folder

log = logging.getLogger(__name__)  # worker lines via logging: Ray Train V2 doubles print() (see ray_ddp)

BLOCKS = 8  # blocks of an in-memory dataset: enough to split and stream, few enough to be cheap


class SplitConfig(ray.train.DataConfig):
    """Train: equal shards (same number of steps on every worker, or DDP hangs). Val: every row once."""

    def configure(self, datasets: dict, world_size: int, worker_handles: Any, worker_node_ids: Any,
                  **kwargs: Any) -> list[dict]:
        output: list[dict] = [{} for _ in range(world_size)]
        for name, ds in datasets.items():
            ds = ds.copy(ds)
            ds.context.execution_options = self._resolve_execution_options(name)
            hints = worker_node_ids if self._enable_shard_locality else None
            for i, split in enumerate(ds.streaming_split(world_size, equal=(name == "train"), locality_hints=hints)):
                output[i][name] = split
        return output


# --- building the datasets (driver) ------------------------------------------------


def from_tensors(dataset: torch.utils.data.TensorDataset) -> ray.data.Dataset:
    """An in-memory TensorDataset of normalised images as a Ray Dataset (image tensor + label columns)."""
    import pyarrow as pa
    from ray.data.extensions import ArrowTensorArray

    x, y = dataset.tensors
    tables = []
    for xs, ys in zip(np.array_split(x.numpy(), BLOCKS), np.array_split(y.numpy(), BLOCKS), strict=True):
        tables.append(pa.table({IMAGE: ArrowTensorArray.from_numpy(np.ascontiguousarray(xs)), LABEL: pa.array(ys)}))
    return ray.data.from_arrow(tables)


def _format_of(uri: str) -> str:
    """'parquet' if any *.parquet file lies under ``uri``, else 'images'."""
    import pyarrow.fs as pafs

    fs, path = data.filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    if not infos:
        raise FileNotFoundError(f"--data-uri {uri}: nothing there")
    return "parquet" if any(i.path.endswith(".parquet") for i in infos) else "images"


def read_location(uri: str, fmt: str) -> ray.data.Dataset:
    fmt = _format_of(uri) if fmt == "auto" else fmt
    if fmt == "parquet":
        parquet = ray.data.read_parquet(uri).select_columns([IMAGE, LABEL])
        return parquet.map_batches(decode_batch, batch_format="numpy")
    images = ray.data.read_images(uri, mode="L", size=(data.IMAGE_SIZE, data.IMAGE_SIZE), include_paths=True)
    return images.map_batches(label_from_folder, batch_format="numpy")


def split_locations(uri: str) -> tuple[str, str | None]:
    """``(train, val)``: ``uri/train`` and ``uri/val`` if both exist, else ``(uri, None)``."""
    import pyarrow.fs as pafs

    fs, path = data.filesystem(uri)
    sub = {name: fs.get_file_info(f"{path.rstrip('/')}/{name}").type for name in ("train", "val")}
    if all(kind == pafs.FileType.Directory for kind in sub.values()):
        base = uri.rstrip("/")
        return f"{base}/train", f"{base}/val"
    return uri, None


def build_datasets(args: argparse.Namespace) -> tuple[ray.data.Dataset, ray.data.Dataset, str]:
    """``(train, val, description)`` on the driver."""
    if args.data_uri is None:
        train_set, val_set = data.load_datasets(args.dataset, args.data_dir, args.train_size, args.val_size, args.seed)
        return (from_tensors(train_set), from_tensors(val_set),
                data.describe(args.dataset, len(train_set), len(val_set), args.data_dir))
    train_uri, val_uri = split_locations(args.data_uri)
    train = read_location(train_uri, args.data_format)
    if val_uri is not None:
        val = read_location(val_uri, args.data_format)
    else:
        train, val = train.train_test_split(test_size=args.val_fraction, shuffle=True, seed=args.seed)
    if args.train_size:
        train = train.limit(args.train_size)
    if args.val_size:
        val = val.limit(args.val_size)
    where = f"{train_uri} + {val_uri}" if val_uri else f"{train_uri} ({args.val_fraction:g} held out for validation)"
    return train, val, f"DATA: Ray Data from {where}"


# --- the workers --------------------------------------------------------------------


def _batches(iterator: Any, batch_size: int, seed: int | None = None, shuffle: int | None = None) -> Iterator:
    for batch in iterator.iter_torch_batches(
        batch_size=batch_size, dtypes={IMAGE: torch.float32, LABEL: torch.int64},
        local_shuffle_buffer_size=shuffle, local_shuffle_seed=seed,
    ):
        yield batch[IMAGE], batch[LABEL]


def evaluate_shard(model: torch.nn.Module, batches: Iterator, device: torch.device,
                   precision: str = "fp32") -> loop.EpochStats:
    """Evaluate this rank's validation shard, which may be any size, even empty.

    A DDP module's forward can be a collective (it broadcasts buffers such as BatchNorm's
    running statistics from rank 0), so ranks with different batch counts would hang. Instead
    every rank takes rank 0's buffers once and evaluates the plain module.
    """
    module = checkpoint.unwrap(model)
    if torch.distributed.is_initialized():
        for buffer in module.buffers():
            torch.distributed.broadcast(buffer, src=0)
    return loop.evaluate(module, batches, device, precision=precision)


def train_loop_per_worker(config: dict) -> None:
    ray_ddp.setup_worker(config)
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    torch.manual_seed(config["seed"])
    batch_size = max(1, config["global_batch_size"] // world_size)
    if rank == 0:
        log.info(config["describe"])
        log.info(f"DATA: {world_size} workers x batch {batch_size} per step, streamed by Ray Data "
                 "(get_dataset_shard + iter_torch_batches)")
    train_shard = ray.train.get_dataset_shard("train")
    val_shard = ray.train.get_dataset_shard("val")

    replica = ray_ddp.replicated_model(config, rank)
    model, optimizer, device, amp = replica.model, replica.optimizer, replica.device, replica.precision

    def one_epoch(epoch: int) -> tuple[loop.EpochStats, loop.EpochStats]:
        # A different local shuffle every epoch (and per rank), reproducible from the seed.
        seed = config["seed"] * 1000 + epoch * 10 + rank
        train_batches = _batches(train_shard, batch_size, seed, config["shuffle_buffer"])
        train_stats = loop.train_epoch(replica.forward, train_batches, optimizer, device, precision=amp,
                                       scaler=replica.scaler)
        return train_stats, evaluate_shard(model, _batches(val_shard, batch_size), device, amp)

    def report(epoch: int, metrics: dict) -> None:
        checkpoint.save_and_report(metrics, model=model, optimizer=optimizer, epoch=epoch, history=replica.history,
                                   scaler=replica.scaler)

    loop.run_epochs(replica.last_epoch + 1, config["epochs"], replica.history, one_epoch, report,
                    log.info if rank == 0 else None, amp)


# --- driver -------------------------------------------------------------------------


def add_data_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ray data")
    group.add_argument("--data-uri", help="Parquet files or an image folder (local path or s3://); "
                       "default: --dataset through Ray Data")
    group.add_argument("--data-format", choices=["auto", "parquet", "images"], default="auto")
    group.add_argument("--val-fraction", type=float, default=0.1,
                       help="held out for validation when --data-uri has no train/ and val/ folders")
    group.add_argument("--shuffle-buffer", type=options.positive_int, default=256,
                       help="rows in each worker's local shuffle buffer")
    group.add_argument("--materialize", action=argparse.BooleanOptionalAction, default=None,
                       help="read and decode all data before training starts instead of streaming it "
                       "(default: only when the training workers take every CPU of the cluster, which "
                       "would leave Ray Data's read tasks none and hang)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return ray_ddp.parse_args(
        argv, prog=f"python -m {__package__}.ray_data_ddp", kind="data", add_strategy_args=add_data_args,
        description="Ray Train DDP fed by Ray Data (ResNet18; MNIST, synthetic digits, Parquet or an image folder)",
    )


def must_materialize(args: argparse.Namespace) -> bool:
    """Streaming reads need a CPU beside the training workers; without one, read everything first."""
    if args.materialize is not None:
        return bool(args.materialize)
    spare = ray.cluster_resources().get("CPU", 0.0) - args.num_workers * args.cpus_per_worker
    if args.data_uri is not None and spare < 1:
        print(f"DATA: the {args.num_workers} training workers take every CPU of the cluster, leaving Ray Data "
              "none to read with while they train: reading and decoding the data first (--materialize)", flush=True)
        return True
    return False


def build_trainer(args: argparse.Namespace) -> ray.train.torch.TorchTrainer:
    train, val, describe = build_datasets(args)
    if must_materialize(args):
        train, val = train.materialize(), val.materialize()
    # --data-uri images are decoded as 1x28x28 grayscale (see image_rows.decode_batch / read_location): an MNIST-shaped model.
    shape_of = args.dataset if args.data_uri is None else "mnist"
    extra = {"shuffle_buffer": args.shuffle_buffer, "describe": describe, "dataset": shape_of}
    return ray_ddp.build_trainer(args, train_loop_per_worker, extra, datasets={"train": train, "val": val},
                                 dataset_config=SplitConfig())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ray.init(log_to_driver=True)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # one line per epoch, not progress bars
    context.print_on_execution_start = False  # nor two lines per dataset execution
    print(f"DATA: source={args.data_uri or args.dataset}", flush=True)
    try:
        trainer = build_trainer(args)
    except (data.DatasetUnavailable, FileNotFoundError) as error:
        ray.shutdown()
        print(f"ERROR: {error}", file=sys.stderr, flush=True)
        return 1
    return ray_ddp.fit(args, trainer)


if __name__ == "__main__":
    sys.exit(main())
