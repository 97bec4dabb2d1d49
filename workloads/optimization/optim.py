"""The optimizers a config can name, each a config component that builds its optimizer.

SGD with momentum/Nesterov and weight decay (workloads/optimization/sgd.py), or torch's Adam.
"Centralized Adam" (docs/benchmarks.md) is Adam stepping on gradients that a strategy has averaged
over all workers, so every worker applies the same update; it needs nothing here beyond Adam.
Torch is imported only to build.
Not here: learning-rate schedules (workloads/optimization/schedule.py sets each step's LR on the
param groups; the optimizer starts at the schedule's base lr).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.components import Choice, Component
from workloads.configuration.fields import ConfigError, setting
from workloads.plugins import points

if TYPE_CHECKING:
    from torch import nn

    from workloads.optimization.sgd import Optimizer


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig(Component):
    name: str  # each optimizer narrows it to its Literal: the key `optimizer`
    weight_decay: float = setting(0.0, ge=0, lt=1)

    def build(
        self, params: Iterable[nn.Parameter], lr: float, extra_weight_decay: float = 0.0
    ) -> Optimizer:
        """The torch optimizer; `extra_weight_decay` is added to the configured one (a model's
        own L2 penalty, applied by the optimizer: ModelConfig.optimizer_weight_decay)."""
        raise NotImplementedError  # a base class: SgdConfig and AdamConfig build


@dataclass(frozen=True, kw_only=True)
class SgdConfig(OptimizerConfig):
    name: Literal["sgd"] = "sgd"
    momentum: float = setting(0.0, ge=0, lt=1)
    nesterov: bool = False

    def validate(self) -> None:
        if self.nesterov and self.momentum <= 0:
            raise ConfigError("nesterov", "Nesterov momentum needs momentum > 0")

    def build(
        self, params: Iterable[nn.Parameter], lr: float, extra_weight_decay: float = 0.0
    ) -> Optimizer:
        from workloads.optimization.sgd import FusedSGD  # torch's fused update, without torch.optim

        return FusedSGD(
            params,
            lr=lr,
            momentum=self.momentum,
            nesterov=self.nesterov,
            weight_decay=self.weight_decay + extra_weight_decay,
        )


@dataclass(frozen=True, kw_only=True)
class AdamConfig(OptimizerConfig):
    name: Literal["adam"] = "adam"
    adam_betas: tuple[float, ...] = setting((0.9, 0.999), ge=0, lt=1)
    adam_eps: float = setting(1e-8, gt=0, le=1)

    def validate(self) -> None:
        if len(self.adam_betas) != 2:
            raise ConfigError("adam_betas", f"expected two numbers, got {self.adam_betas}")

    def build(
        self, params: Iterable[nn.Parameter], lr: float, extra_weight_decay: float = 0.0
    ) -> Optimizer:
        import torch

        beta1, beta2 = self.adam_betas
        return torch.optim.Adam(
            params,
            lr=lr,
            betas=(beta1, beta2),
            eps=self.adam_eps,
            weight_decay=self.weight_decay + extra_weight_decay,
        )


for _option in (SgdConfig, AdamConfig):
    points.OPTIMIZERS.register(_option)
OPTIMIZERS = Choice("optimizer", points.OPTIMIZERS, OptimizerConfig)
