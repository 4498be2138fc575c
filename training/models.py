"""Model factory shared by all entrypoints."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from . import data
from .vit import DEFAULT_VIT_SIZE, vit


def resnet18(in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    """torchvision ResNet18 with its stem rebuilt for ``in_channels`` (1 for MNIST, 3 for CIFAR-10)."""
    from torchvision.models import resnet18 as tv_resnet18

    model = tv_resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


# Each factory under its own name, so a name can never be paired with another's factory; the names the
# flags offer (choices.MODEL_NAMES, without torch) are these (tests/e2e/test_training.py checks both ways).
MODELS: dict[str, Callable[..., nn.Module]] = {factory.__name__: factory for factory in (resnet18, vit)}


def build_model(
    name: str = "resnet18", in_channels: int = 1, num_classes: int = 10, *,
    image_size: int = 28, vit_size: str = DEFAULT_VIT_SIZE,
) -> nn.Module:
    """``image_size`` and ``vit_size`` shape the ViT; ResNet18 adapts to any image size."""
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}") from None
    if name == "vit":
        return factory(in_channels=in_channels, num_classes=num_classes, image_size=image_size, size=vit_size)
    return factory(in_channels=in_channels, num_classes=num_classes)


def model_for(config: dict) -> nn.Module:
    """``config``'s model (``model``, ``vit_size``) shaped for its ``dataset``'s images (1x28x28 or 3x32x32)."""
    channels, image_size = data.input_shape(config["dataset"])
    return build_model(
        config["model"], in_channels=channels, num_classes=data.NUM_CLASSES,
        image_size=image_size, vit_size=config.get("vit_size") or DEFAULT_VIT_SIZE,
    )
