"""Logistic regression: one linear layer giving one logit per sample (task 2a, epsilon).

The loss (binary logistic plus L2) lives in workloads/optimization/objectives.py, not here. The
weights start at zero: the problem is convex, and a zero start is the usual, seed-free choice.
Training computes its gradient in closed form (LinearLogistic) where the strategy allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from workloads.optimization.objectives import RegularizedLogistic


class LogisticRegression(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(num_features, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(1)  # (batch,) logits


class LinearLogistic:
    """The model's loss and gradient in closed form (workloads/optimization/objectives.py,
    ClosedForm).

    With z = x w + b and the mean logistic loss over n samples, dL/dz = (sigmoid(z) - y) / n,
    so dL/dw = x^T dL/dz and dL/db = sum(dL/dz): one matrix-vector product each way, where
    autograd records a graph of a dozen nodes and runs a matrix product for the transposed
    one (see bench/mlbench_compare.py). The L2 penalty's gradient is the optimizer's weight
    decay, as on the autograd path.
    """

    def __init__(self, model: LogisticRegression, objective: RegularizedLogistic) -> None:
        self._weight, self._bias = model.linear.weight, model.linear.bias
        self._objective = objective
        self._saved: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @torch.no_grad()
    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        z = torch.addmv(self._bias, x, self._weight[0])  # the model's logits
        self._saved = (x, z, target)
        return self._objective.loss(z, target)

    @torch.no_grad()
    def backward(self) -> None:
        assert self._saved is not None, "backward() before forward()"
        x, z, target = self._saved
        self._saved = None
        dz = torch.sigmoid(z).sub_(target).div_(z.numel())
        _accumulate(self._weight, torch.mv(x.t(), dz).unsqueeze_(0))
        _accumulate(self._bias, dz.sum().reshape(1))


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    if param.grad is None:
        param.grad = grad
    else:
        param.grad.add_(grad)
