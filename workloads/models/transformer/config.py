"""The Transformer's config (task 4b): model width, feed-forward width, heads, layers
(encoder and decoder each) and dropout, as Vaswani et al. name them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import ConfigError, setting
from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, kw_only=True)
class TransformerConfig(ModelConfig):
    name: Literal["transformer"] = "transformer"
    datasets = ("wmt16", "wmt17")
    task = "translation"

    d_model: int = setting(ge=1, le=65536)
    ffn_dim: int = setting(ge=1, le=262144)
    num_heads: int = setting(ge=1, le=1024)
    num_layers: int = setting(ge=1, le=64)
    dropout: float = setting(0.0, ge=0, lt=1)

    def validate(self) -> None:
        if self.d_model % self.num_heads:
            raise ConfigError("num_heads", f"must divide d_model={self.d_model}")

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.transformer.model import Transformer

        return Transformer(
            num_classes, d_model=self.d_model, ffn_dim=self.ffn_dim, num_heads=self.num_heads,
            num_layers=self.num_layers, dropout=self.dropout,
        )  # fmt: skip
