"""The names the entrypoints' flags offer, in a module without torch.

``training.options`` builds every parser from these, so a launcher that only parses flags and
places workers (``torchrun_launcher`` on the head node) or an entrypoint's ``--help`` never
imports torch (about 1.8 s of start-up). The modules that build the things import the names
from here: ``data`` (datasets), ``models`` (models), ``vit`` (ViT sizes).
"""

from __future__ import annotations

from dataclasses import dataclass

DATASETS = ("mnist", "synthetic", "fashionmnist", "cifar10", "synthetic-cifar10")
MODEL_NAMES = ("resnet18", "vit")


@dataclass(frozen=True)
class ViTSize:
    layers: int
    heads: int
    hidden: int
    mlp: int


VIT_SIZES: dict[str, ViTSize] = {
    "tiny": ViTSize(layers=2, heads=2, hidden=64, mlp=128),  # ~0.07M: CPU tests
    "small": ViTSize(layers=6, heads=4, hidden=192, mlp=384),  # ~1.8M
    "base": ViTSize(layers=12, heads=8, hidden=384, mlp=768),  # ~14.3M: the workshop's
    "large": ViTSize(layers=12, heads=12, hidden=768, mlp=3072),  # ~85M: sharding demos
}
DEFAULT_VIT_SIZE = "base"
