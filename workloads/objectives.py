"""What a task minimizes and how its predictions are scored: the loop's per-task seam.

- "cross-entropy": multi-class, the model gives one logit per class; a prediction is the
  arg-max.
- "logistic": binary, the model gives one logit per sample, labels are 0/1 floats; the loss
  is the mean of log(1 + exp(-s * z)) with s = +-1 (binary cross-entropy with logits) plus
  l2_rate / 2 * ||params||^2 over every parameter (MLBench's BCELossRegularized); a
  prediction is the sign of the logit.
Evaluation reports the data term only (no regularizer), summed so that ranks can add their
parts exactly. Optimizers and models are not here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from workloads.config import TrainConfig


class Objective(Protocol):
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The training objective of one batch (a scalar to call backward() on)."""
        ...

    def eval_sums(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of per-sample losses, number of correct predictions) over one batch."""
        ...


class CrossEntropy:
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)

    def eval_sums(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss_sum = F.cross_entropy(output, target, reduction="sum")
        return loss_sum, (output.argmax(dim=1) == target).sum()


class RegularizedLogistic:
    def __init__(self, params: Iterable[nn.Parameter], l2_rate: float) -> None:
        self._params = list(params)
        self._l2_rate = l2_rate

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        data_term = F.binary_cross_entropy_with_logits(output, target)
        if self._l2_rate == 0.0:
            return data_term
        return data_term + self._l2_rate / 2 * l2_norm_squared(self._params)

    def eval_sums(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss_sum = F.binary_cross_entropy_with_logits(output, target, reduction="sum")
        return loss_sum, ((output > 0) == (target > 0.5)).sum()


def l2_norm_squared(params: Iterable[torch.Tensor]) -> torch.Tensor:
    return torch.stack([p.pow(2).sum() for p in params]).sum()


def build(config: TrainConfig, model: nn.Module) -> Objective:
    """What the configured model family trains on (ModelConfig.objective)."""
    return config.model.objective(model)
