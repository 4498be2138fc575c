"""Datasets for the training entrypoints: real MNIST / FashionMNIST / CIFAR-10 or offline synthetic stand-ins.

All return in-memory ``TensorDataset``s of normalised float images and int64 labels
(1x28x28 for MNIST, FashionMNIST and ``synthetic``; 3x32x32 for CIFAR-10 and
``synthetic-cifar10``; see ``input_shape``), so every entrypoint (Ray DDP, FSDP2,
DeepSpeed, torchrun, Tune) can shard them the same way. There is deliberately no fallback
from a real dataset to a synthetic one: a run that was asked for CIFAR-10 either gets
CIFAR-10 or fails and says how to train offline.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from torch.utils.data import Subset, TensorDataset

import rtjob_contract as contract

from .choices import DATASETS
from .locations import filesystem  # noqa: F401  (re-exported: the entrypoints' one way to open a location)

NUM_CLASSES = 10
IMAGE_SIZE = 28
IN_CHANNELS = 1  # of the MNIST-shaped datasets; use input_shape(name) for any dataset
# (channels, height = width) of each dataset's images.
INPUT_SHAPES = {
    "mnist": (1, 28), "synthetic": (1, 28), "fashionmnist": (1, 28),
    "cifar10": (3, 32), "synthetic-cifar10": (3, 32),
}
# MNIST statistics; the synthetic images are normalised the same way so that the two
# datasets are interchangeable for the model and the optimiser settings.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
FASHIONMNIST_MEAN, FASHIONMNIST_STD = 0.2860, 0.3530
# Per-channel CIFAR-10 training-set statistics; synthetic-cifar10 is normalised the same way.
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
_TORCHVISION = {  # dataset -> (torchvision class name, display name, offline stand-in)
    "mnist": ("MNIST", "MNIST", "synthetic"),
    "fashionmnist": ("FashionMNIST", "FashionMNIST", "synthetic"),
    "cifar10": ("CIFAR10", "CIFAR-10", "synthetic-cifar10"),
}
# Synthetic defaults: big enough that the loss falls visibly over 2 epochs, small enough
# that a 2-worker CPU job (including Ray start) stays well under 3 minutes.
SYNTHETIC_TRAIN_SIZE = 2048
SYNTHETIC_VAL_SIZE = 512


class DatasetUnavailable(RuntimeError):
    """The requested dataset cannot be provided (e.g. MNIST download without internet)."""


def default_data_dir() -> str:
    return os.environ.get(contract.ENV_DATA_DIR) or str(Path("~/.cache/rtjob/data").expanduser())


def input_shape(name: str) -> tuple[int, int]:
    """``(channels, image_size)`` of dataset ``name``'s images (square)."""
    try:
        return INPUT_SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}") from None


def describe(name: str, train_size: int, val_size: int, data_dir: str | None = None) -> str:
    """One log line that makes it impossible to mistake synthetic data for a real dataset."""
    if name == "synthetic":
        return (
            "DATA: using SYNTHETIC digit-like data (offline); pass --dataset mnist for real "
            f"MNIST (train={train_size} val={val_size})"
        )
    if name == "synthetic-cifar10":
        return (
            "DATA: using SYNTHETIC CIFAR-10-shaped data (3x32x32, offline); pass --dataset cifar10 "
            f"for real CIFAR-10 (train={train_size} val={val_size})"
        )
    display = _TORCHVISION[name][1] if name in _TORCHVISION else name
    return f"DATA: {display} from {data_dir or default_data_dir()} (train={train_size} val={val_size})"


def load_datasets(
    name: str,
    data_dir: str | None = None,
    train_size: int | None = None,
    val_size: int | None = None,
    seed: int = 0,
) -> tuple[TensorDataset, TensorDataset]:
    """Return ``(train, val)``; sizes of ``None`` mean the dataset's default size."""
    if name in _TORCHVISION:
        return load_torchvision(name, data_dir or default_data_dir(), train_size, val_size)
    if name in ("synthetic", "synthetic-cifar10"):
        return (synthetic(name, train_size or SYNTHETIC_TRAIN_SIZE, seed, "train", data_dir),
                synthetic(name, val_size or SYNTHETIC_VAL_SIZE, seed, "val", data_dir))
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def eval_shard(dataset: TensorDataset, rank: int, world_size: int) -> Subset:
    """Rank ``rank``'s share of ``dataset``: every sample exactly once over all ranks.

    Unlike ``DistributedSampler`` this does not pad the last ranks with repeated samples,
    so all-reduced validation means are exact. Shards may differ in length by one, which
    is safe for forward-only evaluation of replicated (DDP) models under ``no_grad``;
    sharded models whose forward is a collective need equal batch counts instead.
    """
    return Subset(dataset, range(rank, len(dataset), world_size))


# --- MNIST, FashionMNIST, CIFAR-10 (torchvision) -----------------------------------


def load_mnist(
    data_dir: str, train_size: int | None = None, val_size: int | None = None
) -> tuple[TensorDataset, TensorDataset]:
    return load_torchvision("mnist", data_dir, train_size, val_size)


def load_torchvision(
    name: str, data_dir: str, train_size: int | None = None, val_size: int | None = None
) -> tuple[TensorDataset, TensorDataset]:
    import torchvision.datasets  # import here: synthetic runs need no torchvision

    class_name, display, offline = _TORCHVISION[name]
    dataset_class = getattr(torchvision.datasets, class_name)
    os.makedirs(data_dir, exist_ok=True)
    # One download per node: the first worker downloads, the others wait on the lock and
    # then find the files already there (torchvision skips the download if they exist).
    with FileLock(os.path.join(data_dir, f"{name}.lock")):
        try:
            train = dataset_class(data_dir, train=True, download=True)
            val = dataset_class(data_dir, train=False, download=True)
        except Exception as exc:  # torchvision raises RuntimeError/URLError/OSError here
            # torchvision lists every mirror it tried; the last line is the actual cause.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            reason = (lines[-1] if lines else type(exc).__name__)[:200]
            raise DatasetUnavailable(
                f"{display} is not in {data_dir} and could not be downloaded ({reason}); "
                f"pass --dataset {offline} to train offline on generated data of the same shape"
            ) from None
    return _to_tensors(name, train, train_size), _to_tensors(name, val, val_size)


def _to_tensors(name: str, dataset: Any, size: int | None) -> TensorDataset:  # a torchvision dataset
    # Normalise the whole uint8 tensor once instead of running PIL transforms per sample.
    if name == "cifar10":  # numpy (N, 32, 32, 3) uint8 and a list of labels
        x = torch.from_numpy(dataset.data[:size]).permute(0, 3, 1, 2).float().div_(255.0)
        labels = torch.as_tensor(dataset.targets[:size])
        return TensorDataset(_normalize(x, CIFAR10_MEAN, CIFAR10_STD).contiguous(), labels.long())
    mean, std = (MNIST_MEAN, MNIST_STD) if name == "mnist" else (FASHIONMNIST_MEAN, FASHIONMNIST_STD)
    images, labels = dataset.data[:size], dataset.targets[:size]
    x = images.unsqueeze(1).float().div_(255.0)
    return TensorDataset(x.sub_(mean).div_(std), labels.long())


def _normalize(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    return x.sub_(torch.tensor(mean).view(1, -1, 1, 1)).div_(torch.tensor(std).view(1, -1, 1, 1))


# --- Synthetic digit-like data ------------------------------------------------------

# A synthetic split this large is generated once per machine and kept in the data folder: 50,000 CIFAR-shaped
# images take ~45 s of one core to draw (every rank of every run drew them; measured here, a busy 2-core machine),
# loading the kept file a fraction of a second. Smaller splits (tests, the local profiles) are drawn each time.
SYNTHETIC_CACHE_MIN = 8192


def synthetic(name: str, size: int, seed: int, split: str, data_dir: str | None = None) -> TensorDataset:
    """Split ``split`` of synthetic dataset ``name``: ``make_synthetic``'s, from the node's cache when large."""
    channels, image_size = INPUT_SHAPES[name]
    if size < SYNTHETIC_CACHE_MIN:
        return make_synthetic(size, seed, split, channels, image_size)
    folder = os.path.join(data_dir or default_data_dir(), "synthetic")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}-{split}-{size}-seed{seed}-{_generator_code()}.pt")
    with FileLock(path + ".lock"):  # the first rank of a node draws and writes; the others wait, then read
        if not os.path.exists(path):
            dataset = make_synthetic(size, seed, split, channels, image_size)
            tmp = f"{path}.{os.getpid()}.tmp"
            torch.save({"x": dataset.tensors[0], "y": dataset.tensors[1]}, tmp)
            os.replace(tmp, path)
            return dataset
    saved = torch.load(path, weights_only=True)
    return TensorDataset(saved["x"], saved["y"])


_POINTS_PER_PROTOTYPE = 4  # a 3-segment polyline per class, like a digit's strokes


def make_synthetic(
    size: int, seed: int = 0, split: str = "train", channels: int = 1, image_size: int = IMAGE_SIZE
) -> TensorDataset:
    """Deterministic, learnable 10-class digit-like images, generated offline.

    Each class has a prototype polyline drawn from ``seed`` (shared by all splits).
    Each sample jitters the prototype's points, shifts and scales it, varies stroke
    width and ink, may add a distractor stroke and adds pixel noise, so a CNN has to
    learn the shapes rather than memorise pixels. Train and val use different sample
    streams of the same prototypes.

    ``channels=1, image_size=28`` (the default) is MNIST-shaped and normalised like MNIST;
    ``channels=3, image_size=32`` is CIFAR-10-shaped: the same strokes, coloured (see
    ``_colorize``) and normalised with CIFAR-10's per-channel statistics.
    """
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, not {channels}")
    proto_gen = torch.Generator().manual_seed(seed)
    margin = 5.0 * image_size / IMAGE_SIZE
    prototypes = margin + (image_size - 2 * margin) * torch.rand(
        NUM_CLASSES, _POINTS_PER_PROTOTYPE, 2, generator=proto_gen
    )

    gen = torch.Generator().manual_seed(seed * 1009 + (1 if split == "train" else 2))
    labels = torch.randint(0, NUM_CLASSES, (size,), generator=gen)
    points = prototypes[labels]  # (N, P, 2) in pixel coordinates (x, y)
    center = image_size / 2 - 0.5
    scale = 0.85 + 0.3 * torch.rand(size, 1, 1, generator=gen)
    shift = torch.randint(-3, 4, (size, 1, 2), generator=gen).float()
    jitter = 0.8 * torch.randn(points.shape, generator=gen)
    points = (points - center) * scale + center + shift + jitter
    segments = torch.cat([points[:, :-1], points[:, 1:]], dim=-1)  # (N, P-1, 4)

    width = 0.7 + 0.8 * torch.rand(size, 1, 1, generator=gen)
    ink = 0.7 + 0.3 * torch.rand(size, 1, 1, generator=gen)
    images = _render(segments, width, image_size) * ink

    # A faint random stroke on half of the samples, so not every bright pixel is signal.
    distractor = (4.0 + 20.0 * torch.rand(size, 1, 4, generator=gen)) * (image_size / IMAGE_SIZE)
    faint = 0.5 * (torch.rand(size, 1, 1, generator=gen) < 0.5)
    images = torch.maximum(images, _render(distractor, width, image_size) * faint)

    images = images + 0.15 * torch.randn(images.shape, generator=gen)
    x = images.clamp_(0.0, 1.0).unsqueeze(1)
    if channels == 3:
        colors = torch.rand(NUM_CLASSES, 3, generator=proto_gen)  # after the prototypes: 1-channel data unchanged
        return TensorDataset(_colorize(x, labels, colors, gen), labels)
    return TensorDataset(x.sub_(MNIST_MEAN).div_(MNIST_STD), labels)


def _colorize(ink: torch.Tensor, labels: torch.Tensor, colors: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """(N, 1, H, W) ink in [0, 1] -> (N, 3, H, W) RGB, normalised like CIFAR-10.

    Strokes take a colour that is part class colour, part random; the background is a
    random darker colour. Colour alone is a weak, noisy cue; the stroke shape is the strong one.
    """
    size = ink.size(0)
    stroke = 0.55 * colors[labels] + 0.45 * torch.rand(size, 3, generator=gen)
    background = 0.1 + 0.4 * torch.rand(size, 3, generator=gen)
    rgb = background[:, :, None, None] * (1.0 - ink) + stroke[:, :, None, None] * ink
    rgb = (rgb + 0.05 * torch.randn(rgb.shape, generator=gen)).clamp_(0.0, 1.0)
    return _normalize(rgb, CIFAR10_MEAN, CIFAR10_STD)


@functools.cache
def _generator_code() -> str:
    """A digest of the generator's own code: a kept file is named by it, so a changed generator never reads an old
    file."""
    import hashlib
    import inspect

    code = "".join(inspect.getsource(f) for f in _GENERATOR)
    return hashlib.sha1(code.encode()).hexdigest()[:10]


def _render(segments: torch.Tensor, width: torch.Tensor, image_size: int = IMAGE_SIZE, chunk: int = 2048) -> torch.Tensor:
    """Anti-aliased strokes: (N, S, 4) segments -> (N, image_size, image_size) images in [0, 1]."""
    coords = torch.arange(image_size, dtype=torch.float32)
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


_GENERATOR = (make_synthetic, _render, _colorize)  # as defined here (what the kept files' names digest)
