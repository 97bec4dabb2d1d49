"""What a task minimizes and how its predictions are scored: the loop's per-task seam.

- "cross-entropy": multi-class, the model gives one logit per class; a prediction is the
  arg-max.
- "logistic": binary, the model gives one logit per sample, labels are 0/1 floats; the loss
  is the mean of log(1 + exp(-s * z)) with s = +-1 (binary cross-entropy with logits) plus
  l2_rate / 2 * ||params||^2 over every parameter (MLBench's BCELossRegularized); a
  prediction is the sign of the logit.
  The regularizer's gradient, l2_rate * p, is what weight decay adds to a gradient in SGD and
  in Adam (coupled L2, not AdamW), so the optimizer applies it (one fused update: the model
  config's `optimizer_weight_decay`) rather than autograd (a dozen small ops forward and
  backward: a third of a step of this model). `loss` then returns the data term, for
  backward, and keeps the regularizer's value at every step (one fused op) for the reported
  training loss, which
  `penalty_sum` adds at the end of an epoch: the update and the reported loss are the same.
Evaluation reports the data term only (no regularizer), summed so that ranks can add their
parts exactly. Optimizers and models are not here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class Objective(Protocol):
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The training objective of one batch (a scalar to call backward() on), less any
        penalty whose gradient the optimizer applies (see penalty_sum)."""
        ...

    def penalty_sum(self) -> float:
        """The penalty's values at the steps since the last call, summed: what the reported
        training loss adds to the sum of loss() values (0 without a penalty)."""
        ...

    def eval_sums(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of per-sample losses, number of correct predictions) over one batch."""
        ...


class ClosedForm(Protocol):
    """A model and objective whose gradient has a closed form, computed without autograd:
    for a model as small as a linear one, autograd's graph costs more than the arithmetic
    (logistic regression: about 2/3 of a step). The same loss and the same gradient as
    loss.backward() on the model's output (tests/workloads/test_closed_form.py holds them
    to it). Used only under strategies that exchange gradients after backward; DDP's hooks
    need autograd."""

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The batch's training loss, as Objective.loss on the model's output gives it
        (detached); keeps what backward() needs."""
        ...

    def backward(self) -> None:
        """The last forward's gradients, added into the parameters' .grad as autograd
        would."""
        ...


class CrossEntropy:
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)

    def eval_sums(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss_sum = F.cross_entropy(output, target, reduction="sum")
        return loss_sum, (output.argmax(dim=1) == target).sum()

    def penalty_sum(self) -> float:
        return 0.0


class RegularizedLogistic:
    def __init__(self, params: Iterable[nn.Parameter], l2_rate: float) -> None:
        self._params: list[torch.Tensor] = list(params)
        self._l2_rate = l2_rate
        # Each parameter's squares summed over the steps since the last penalty_sum().
        self._squares = [torch.zeros_like(p, requires_grad=False) for p in self._params]

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self._l2_rate:
            with torch.no_grad():  # the weights this step's loss is taken at
                torch._foreach_addcmul_(self._squares, self._params, self._params)
        return F.binary_cross_entropy_with_logits(output, target)

    def penalty_sum(self) -> float:
        total = sum(float(s.sum()) for s in self._squares)
        for s in self._squares:
            s.zero_()
        return self._l2_rate / 2 * total

    def eval_sums(
        self, output: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss_sum = F.binary_cross_entropy_with_logits(output, target, reduction="sum")
        return loss_sum, ((output > 0) == (target > 0.5)).sum()
