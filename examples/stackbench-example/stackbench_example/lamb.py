"""LAMB (You et al. 2020): Adam's update scaled per layer by |w| / |update|, so that large
batches can take large learning rates. The config is torch-free; the optimizer is built in
a worker."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import ConfigError, setting
from workloads.optimization.optim import OptimizerConfig
from workloads.plugins import points

if TYPE_CHECKING:
    from torch import nn

    from workloads.optimization.sgd import Optimizer


@points.OPTIMIZERS.register
@dataclass(frozen=True, kw_only=True)
class LambConfig(OptimizerConfig):
    name: Literal["lamb"] = "lamb"
    lamb_betas: tuple[float, ...] = setting((0.9, 0.999), ge=0, lt=1)
    lamb_eps: float = setting(1e-6, gt=0, le=1)

    def validate(self) -> None:
        if len(self.lamb_betas) != 2:
            raise ConfigError("lamb_betas", f"expected two numbers, got {self.lamb_betas}")

    def build(
        self, params: Iterable[nn.Parameter], lr: float, extra_weight_decay: float = 0.0
    ) -> Optimizer:
        from stackbench_example.lamb_optim import Lamb

        beta1, beta2 = self.lamb_betas
        return Lamb(params, lr, (beta1, beta2), self.lamb_eps,
                    self.weight_decay + extra_weight_decay)  # fmt: skip
