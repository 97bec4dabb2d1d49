"""CIFAR ResNet's config (task 1a): depth 6n+2 and the residual block's layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import ConfigError, setting
from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, kw_only=True)
class ResNetConfig(ModelConfig):
    name: Literal["resnet-cifar"] = "resnet-cifar"
    datasets = ("cifar10",)
    task = "classification"
    image_input = True

    depth: int = setting(ge=8, le=1202)  # 6n+2 layers; He et al. report 20, 32, 44, 56, 110
    # m1: post-activation residual blocks (He et al. 2015); m2: pre-activation (2016).
    variant: Literal["m1", "m2"] = "m1"

    def validate(self) -> None:
        if (self.depth - 2) % 6:
            raise ConfigError("depth", f"must be 6n+2 (20, 32, 44, 56), got {self.depth}")

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.resnet.model import CifarResNet

        return CifarResNet(self.depth, self.variant, num_classes)
