"""Datasets for the training entrypoints: real MNIST or an offline synthetic stand-in.

Both return in-memory ``TensorDataset``s of normalised 1x28x28 float images and int64
labels, so every entrypoint (Ray DDP, FSDP2, DeepSpeed, torchrun, Tune) can shard them
the same way. There is deliberately no fallback from one to the other: a run that was
asked for MNIST either gets MNIST or fails and says how to train offline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from torch.utils.data import Subset, TensorDataset

DATASETS = ("mnist", "synthetic")
NUM_CLASSES = 10
IMAGE_SIZE = 28
IN_CHANNELS = 1
# MNIST statistics; the synthetic images are normalised the same way so that the two
# datasets are interchangeable for the model and the optimiser settings.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
# Synthetic defaults: big enough that the loss falls visibly over 2 epochs, small enough
# that a 2-worker CPU job (including Ray start) stays well under 3 minutes.
SYNTHETIC_TRAIN_SIZE = 2048
SYNTHETIC_VAL_SIZE = 512


class DatasetUnavailable(RuntimeError):
    """The requested dataset cannot be provided (e.g. MNIST download without internet)."""


def default_data_dir() -> str:
    return os.environ.get("RTJOB_DATA_DIR") or str(Path("~/.cache/rtjob/data").expanduser())


def describe(name: str, train_size: int, val_size: int, data_dir: str | None = None) -> str:
    """One log line that makes it impossible to mistake synthetic data for MNIST."""
    if name == "synthetic":
        return (
            "DATA: using SYNTHETIC digit-like data (offline); pass --dataset mnist for real "
            f"MNIST (train={train_size} val={val_size})"
        )
    return f"DATA: MNIST from {data_dir or default_data_dir()} (train={train_size} val={val_size})"


def load_datasets(
    name: str,
    data_dir: str | None = None,
    train_size: int | None = None,
    val_size: int | None = None,
    seed: int = 0,
) -> tuple[TensorDataset, TensorDataset]:
    """Return ``(train, val)``; sizes of ``None`` mean the dataset's default size."""
    if name == "mnist":
        return load_mnist(data_dir or default_data_dir(), train_size, val_size)
    if name == "synthetic":
        return (
            make_synthetic(train_size or SYNTHETIC_TRAIN_SIZE, seed, split="train"),
            make_synthetic(val_size or SYNTHETIC_VAL_SIZE, seed, split="val"),
        )
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def eval_shard(dataset: TensorDataset, rank: int, world_size: int) -> Subset:
    """Rank ``rank``'s share of ``dataset``: every sample exactly once over all ranks.

    Unlike ``DistributedSampler`` this does not pad the last ranks with repeated samples,
    so all-reduced validation means are exact. Shards may differ in length by one, which
    is safe for forward-only evaluation of replicated (DDP) models under ``no_grad``;
    sharded models whose forward is a collective need equal batch counts instead.
    """
    return Subset(dataset, range(rank, len(dataset), world_size))


# --- MNIST --------------------------------------------------------------------------


def load_mnist(
    data_dir: str, train_size: int | None = None, val_size: int | None = None
) -> tuple[TensorDataset, TensorDataset]:
    from torchvision.datasets import MNIST  # import here: synthetic runs need no torchvision

    os.makedirs(data_dir, exist_ok=True)
    # One download per node: the first worker downloads, the others wait on the lock and
    # then find the files already there (torchvision skips the download if they exist).
    with FileLock(os.path.join(data_dir, "mnist.lock")):
        try:
            train = MNIST(data_dir, train=True, download=True)
            val = MNIST(data_dir, train=False, download=True)
        except Exception as exc:  # torchvision raises RuntimeError/URLError/OSError here
            # torchvision lists every mirror it tried; the last line is the actual cause.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            reason = (lines[-1] if lines else type(exc).__name__)[:200]
            raise DatasetUnavailable(
                f"MNIST is not in {data_dir} and could not be downloaded ({reason}); "
                "pass --dataset synthetic to train offline on generated digit-like data"
            ) from None
    return _to_tensors(train, train_size), _to_tensors(val, val_size)


def _to_tensors(mnist: Any, size: int | None) -> TensorDataset:  # a torchvision MNIST
    # Normalise the whole uint8 tensor once instead of running PIL transforms per sample.
    images, labels = mnist.data[:size], mnist.targets[:size]
    x = images.unsqueeze(1).float().div_(255.0)
    return TensorDataset(x.sub_(MNIST_MEAN).div_(MNIST_STD), labels.long())


# --- Synthetic digit-like data ------------------------------------------------------

_POINTS_PER_PROTOTYPE = 4  # a 3-segment polyline per class, like a digit's strokes


def make_synthetic(size: int, seed: int = 0, split: str = "train") -> TensorDataset:
    """Deterministic, learnable 10-class 28x28 digit-like images, generated offline.

    Each class has a prototype polyline drawn from ``seed`` (shared by all splits).
    Each sample jitters the prototype's points, shifts and scales it, varies stroke
    width and ink, may add a distractor stroke and adds pixel noise, so a CNN has to
    learn the shapes rather than memorise pixels. Train and val use different sample
    streams of the same prototypes.
    """
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    proto_gen = torch.Generator().manual_seed(seed)
    prototypes = 5.0 + 18.0 * torch.rand(NUM_CLASSES, _POINTS_PER_PROTOTYPE, 2, generator=proto_gen)

    gen = torch.Generator().manual_seed(seed * 1009 + (1 if split == "train" else 2))
    labels = torch.randint(0, NUM_CLASSES, (size,), generator=gen)
    points = prototypes[labels]  # (N, P, 2) in pixel coordinates (x, y)
    center = IMAGE_SIZE / 2 - 0.5
    scale = 0.85 + 0.3 * torch.rand(size, 1, 1, generator=gen)
    shift = torch.randint(-3, 4, (size, 1, 2), generator=gen).float()
    jitter = 0.8 * torch.randn(points.shape, generator=gen)
    points = (points - center) * scale + center + shift + jitter
    segments = torch.cat([points[:, :-1], points[:, 1:]], dim=-1)  # (N, P-1, 4)

    width = 0.7 + 0.8 * torch.rand(size, 1, 1, generator=gen)
    ink = 0.7 + 0.3 * torch.rand(size, 1, 1, generator=gen)
    images = _render(segments, width) * ink

    # A faint random stroke on half of the samples, so not every bright pixel is signal.
    distractor = 4.0 + 20.0 * torch.rand(size, 1, 4, generator=gen)
    faint = 0.5 * (torch.rand(size, 1, 1, generator=gen) < 0.5)
    images = torch.maximum(images, _render(distractor, width) * faint)

    images = images + 0.15 * torch.randn(images.shape, generator=gen)
    x = images.clamp_(0.0, 1.0).unsqueeze(1)
    return TensorDataset(x.sub_(MNIST_MEAN).div_(MNIST_STD), labels)


def _render(segments: torch.Tensor, width: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """Anti-aliased strokes: (N, S, 4) segments -> (N, 28, 28) images in [0, 1]."""
    coords = torch.arange(IMAGE_SIZE, dtype=torch.float32)
    grid = torch.stack(torch.meshgrid(coords, coords, indexing="xy"), dim=-1)  # (H, W, 2)
    out = []
    for seg, w in zip(segments.split(chunk), width.split(chunk), strict=True):  # bounds peak memory
        a = seg[:, :, None, None, :2]
        ab = seg[:, :, None, None, 2:] - a
        ap = grid - a
        t = ((ap * ab).sum(-1) / (ab * ab).sum(-1).clamp_min(1e-6)).clamp(0.0, 1.0)
        dist = (ap - t[..., None] * ab).norm(dim=-1)  # distance of each pixel to each segment
        out.append((w[:, :, :, None] + 0.5 - dist).clamp(0.0, 1.0).amax(dim=1))
    return torch.cat(out)
