"""Model factory shared by all entrypoints."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn


def resnet18(in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    """torchvision ResNet18 with its stem rebuilt for ``in_channels`` (1 for MNIST)."""
    from torchvision.models import resnet18 as tv_resnet18

    model = tv_resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


MODELS: dict[str, Callable[..., nn.Module]] = {"resnet18": resnet18}


def build_model(name: str = "resnet18", in_channels: int = 1, num_classes: int = 10) -> nn.Module:
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}") from None
    return factory(in_channels=in_channels, num_classes=num_classes)
