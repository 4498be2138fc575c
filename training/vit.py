"""Vision Transformer for small images (CIFAR-10 32x32, MNIST-shaped 28x28), in named sizes.

torchvision's ``VisionTransformer`` with a patch embedding for ``in_channels``. ``base`` is
the workshop's CIFAR-10 ViT (patch 4, 12 blocks, width 384, MLP 768, 8 heads: 14.3M
parameters, 64 patches + a class token per 32x32 image); ``small`` and ``tiny`` keep
the same structure (a stack of encoder blocks, the unit FSDP2 shards) at sizes that
train in seconds on a CPU. ``large`` is a parameter-heavy variant for sharding demos.
"""

from __future__ import annotations

from torch import nn

from .choices import DEFAULT_VIT_SIZE, VIT_SIZES


def patch_size_for(image_size: int) -> int:
    """4 for 32x32 (8x8 patches) and 28x28 (7x7 patches); the image size must be a multiple."""
    for patch in (4, 7, 8, 2):
        if image_size % patch == 0:
            return patch
    raise ValueError(f"no patch size divides image size {image_size}")


def vit(
    in_channels: int = 3, num_classes: int = 10, image_size: int = 32, size: str = DEFAULT_VIT_SIZE
) -> nn.Module:
    from torchvision.models import VisionTransformer  # import here: synthetic MNIST runs need none

    try:
        shape = VIT_SIZES[size]
    except KeyError:
        raise ValueError(f"unknown ViT size {size!r}; choose one of {', '.join(VIT_SIZES)}") from None
    patch = patch_size_for(image_size)
    model = VisionTransformer(
        image_size=image_size, patch_size=patch, num_layers=shape.layers, num_heads=shape.heads,
        hidden_dim=shape.hidden, mlp_dim=shape.mlp, num_classes=num_classes,
    )
    if in_channels != 3:  # torchvision's stem expects RGB
        model.conv_proj = nn.Conv2d(in_channels, shape.hidden, kernel_size=patch, stride=patch)
    return model


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The encoder blocks of a ViT from ``vit()``: FSDP2's per-block sharding unit."""
    return list(model.encoder.layers.children())  # type: ignore[union-attr]
