"""GNMT's config (task 4a): LSTM width, layers (encoder and decoder each) and dropout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import setting
from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, kw_only=True)
class GnmtConfig(ModelConfig):
    name: Literal["gnmt"] = "gnmt"
    datasets = ("wmt16", "wmt17")
    task = "translation"

    hidden_dim: int = setting(ge=1, le=65536)  # LSTM width
    num_layers: int = setting(ge=2, le=64)  # the encoder's first layer is bidirectional
    dropout: float = setting(0.0, ge=0, lt=1)

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.gnmt.model import GNMT

        return GNMT(
            num_classes, hidden_dim=self.hidden_dim, num_layers=self.num_layers,
            dropout=self.dropout,
        )  # fmt: skip
