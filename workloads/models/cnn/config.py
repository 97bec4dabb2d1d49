"""The quickstart CNN's config: nothing to size, it is one network for 8x8 digits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, kw_only=True)
class DigitsCnnConfig(ModelConfig):
    name: Literal["cnn-digits"] = "cnn-digits"
    datasets = ("digits",)
    task = "classification"
    image_input = True

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.cnn.model import DigitsCNN

        return DigitsCNN(num_classes)
