"""AWD-LSTM's config (task 3a): sizes and the five dropouts of Merity et al. 2017, named as
the network's arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import setting
from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, kw_only=True)
class AwdLstmConfig(ModelConfig):
    name: Literal["awd-lstm"] = "awd-lstm"
    datasets = ("wikitext2",)
    task = "language_model"

    embed_dim: int = setting(ge=1, le=65536)  # also the last layer's width (tied weights)
    hidden_dim: int = setting(ge=1, le=65536)
    num_layers: int = setting(ge=1, le=64)
    dropout: float = setting(0.0, ge=0, lt=1)  # on the last layer's output
    dropout_hidden: float = setting(0.0, ge=0, lt=1)  # between layers
    dropout_input: float = setting(0.0, ge=0, lt=1)  # on the embeddings
    dropout_embedding: float = setting(0.0, ge=0, lt=1)  # whole words
    weight_drop: float = setting(0.0, ge=0, lt=1)  # DropConnect on hidden-to-hidden weights

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.awd_lstm.model import AWDLSTM

        return AWDLSTM(
            num_classes,
            embed_dim=self.embed_dim,
            hidden_dim=self.hidden_dim,
            num_layers=self.num_layers,
            dropout=self.dropout,
            dropout_hidden=self.dropout_hidden,
            dropout_input=self.dropout_input,
            dropout_embedding=self.dropout_embedding,
            weight_drop=self.weight_drop,
        )
