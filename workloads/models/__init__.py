"""Model construction by name (one model family per module)."""

from __future__ import annotations

import math

import torch
from torch import nn

from workloads.config import TrainConfig


def build(config: TrainConfig, num_classes: int, sample_shape: tuple[int, ...] = ()) -> nn.Module:
    """The configured model, in its configured memory format. `num_classes` is the number of
    outputs (the vocabulary size for the sequence models); `sample_shape` is one input
    sample's shape (logistic regression takes its width from it)."""
    model = _build(config, num_classes, sample_shape)
    if config.memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    return model


def _build(config: TrainConfig, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
    if config.model == "cnn-digits":
        from workloads.models.cnn.model import DigitsCNN

        return DigitsCNN(num_classes)
    if config.model == "resnet-cifar":
        from workloads.models.resnet.model import CifarResNet

        return CifarResNet(config.resnet_depth, config.resnet_variant, num_classes)
    if config.model == "vgg11-bn":
        from workloads.models.vgg.model import VGG

        return VGG(num_classes=num_classes)
    if config.model == "logreg":
        from workloads.models.logreg.model import LogisticRegression

        if num_classes != 2:
            raise ValueError(f"logistic regression is binary; the data has {num_classes} classes")
        return LogisticRegression(math.prod(sample_shape))
    if config.model == "awd-lstm":
        from workloads.models.awd_lstm.model import AWDLSTM

        return AWDLSTM(
            num_classes,
            embed_dim=config.embed_dim,
            hidden_dim=config.hidden_dim,
            num_layers=config.num_layers,
            dropout=config.dropout,
            dropout_hidden=config.lstm_dropout_hidden,
            dropout_input=config.lstm_dropout_input,
            dropout_embedding=config.lstm_dropout_embedding,
            weight_drop=config.lstm_weight_drop,
        )
    if config.model == "gnmt":
        from workloads.models.gnmt.model import GNMT

        return GNMT(
            num_classes,
            hidden_dim=config.hidden_dim,
            num_layers=config.num_layers,
            dropout=config.dropout,
        )
    if config.model == "transformer":
        from workloads.models.transformer.model import Transformer

        return Transformer(
            num_classes,
            d_model=config.hidden_dim,
            ffn_dim=config.ffn_dim,
            num_heads=config.num_heads,
            num_layers=config.num_layers,
            dropout=config.dropout,
        )
    raise ValueError(f"no builder for model {config.model!r}")
