"""Model construction by name (one model family per module)."""

from __future__ import annotations

from torch import nn

from workloads.config import TrainConfig


def build(config: TrainConfig, num_classes: int) -> nn.Module:
    if config.model == "cnn-digits":
        from workloads.models.cnn import DigitsCNN

        return DigitsCNN(num_classes)
    raise ValueError(f"no builder for model {config.model!r}")
