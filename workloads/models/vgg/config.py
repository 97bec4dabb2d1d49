"""VGG-11-BN's config (the CS744 study): one fixed network for CIFAR-10."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, kw_only=True)
class VggConfig(ModelConfig):
    name: Literal["vgg11-bn"] = "vgg11-bn"
    datasets = ("cifar10",)
    task = "classification"
    image_input = True

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.vgg.model import VGG

        return VGG(num_classes=num_classes)
