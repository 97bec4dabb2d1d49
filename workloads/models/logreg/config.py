"""Logistic regression's config (task 2a): binary, one logit per sample, trained on the
logistic loss plus l2_rate / 2 * ||params||^2 (MLBench's definition of its L2 term)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import setting
from workloads.models.base import ModelConfig

if TYPE_CHECKING:
    from torch import nn

    from workloads.optimization.objectives import ClosedForm, Objective


@dataclass(frozen=True, kw_only=True)
class LogRegConfig(ModelConfig):
    name: Literal["logreg"] = "logreg"
    datasets = ("epsilon",)
    task = "classification"

    l2_rate: float = setting(0.0, ge=0, le=1)

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        from workloads.models.logreg.model import LogisticRegression

        if num_classes != 2:
            raise ValueError(f"logistic regression is binary; the data has {num_classes} classes")
        return LogisticRegression(math.prod(sample_shape))

    def objective(self, model: nn.Module) -> Objective:
        from workloads.optimization.objectives import RegularizedLogistic

        return RegularizedLogistic(model.parameters(), self.l2_rate)

    def closed_form(self, model: nn.Module, objective: Objective) -> ClosedForm:
        from workloads.models.logreg.model import LinearLogistic, LogisticRegression
        from workloads.optimization.objectives import RegularizedLogistic

        assert isinstance(model, LogisticRegression)
        assert isinstance(objective, RegularizedLogistic)
        return LinearLogistic(model, objective)

    def optimizer_weight_decay(self) -> float:
        return self.l2_rate
