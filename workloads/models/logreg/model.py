"""Logistic regression: one linear layer giving one logit per sample (task 2a, epsilon).

The loss (binary logistic plus L2) lives in workloads/objectives.py, not here. The weights
start at zero: the problem is convex, and a zero start is the usual, seed-free choice.
"""

from __future__ import annotations

import torch
from torch import nn


class LogisticRegression(nn.Module):
    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(num_features, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(1)  # (batch,) logits
