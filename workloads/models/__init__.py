"""The model families, and the one function that builds a run's model.

Each family is a package: config.py (a torch-free ModelConfig: sizes, the data sets and task
it is for, how to build it) beside model.py (the network). Ours register with the models
extension point here, as a plugin's family registers itself (workloads/plugins/points.py);
MODELS is the config choice over that point. This module imports no torch: the runner reads
MODELS on its start-up path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.configuration.components import Choice
from workloads.models.awd_lstm.config import AwdLstmConfig
from workloads.models.base import ModelConfig
from workloads.models.cnn.config import DigitsCnnConfig
from workloads.models.gnmt.config import GnmtConfig
from workloads.models.logreg.config import LogRegConfig
from workloads.models.resnet.config import ResNetConfig
from workloads.models.transformer.config import TransformerConfig
from workloads.models.vgg.config import VggConfig
from workloads.plugins import points

if TYPE_CHECKING:
    from torch import nn

__all__ = ["MODELS", "ModelConfig", "build"]

for _family in (
    DigitsCnnConfig,
    ResNetConfig,
    VggConfig,
    LogRegConfig,
    AwdLstmConfig,
    GnmtConfig,
    TransformerConfig,
):
    points.MODELS.register(_family)
MODELS = Choice("model", points.MODELS, ModelConfig)


def build(
    config: ModelConfig,
    num_classes: int,
    sample_shape: tuple[int, ...] = (),
    memory_format: str = "contiguous",
) -> nn.Module:
    """The model `config` builds, in `memory_format` (ExecutionConfig.memory_format).
    `num_classes` is the number of outputs (the vocabulary size for the sequence models);
    `sample_shape` is one input sample's shape (logistic regression takes its width from
    it)."""
    model = config.build(num_classes, sample_shape)
    if memory_format == "channels_last":
        import torch

        # Module.to takes memory_format at run time; torch's overloads leave it out.
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model
