"""The optimizer a config names, over a model's parameters.

SGD with momentum/Nesterov and weight decay, or Adam. "Centralized Adam" (shared/BENCHMARKS.md)
is Adam stepping on gradients that a strategy has averaged over all workers, so every worker
applies the same update; it needs nothing here beyond Adam. Not here: learning-rate schedules
(workloads/schedule.py sets each step's LR on the param groups).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from workloads.config import TrainConfig
from workloads.objectives import optimizer_weight_decay


def build_optimizer(config: TrainConfig, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    # The configured decay, plus the gradient of the objective's L2 penalty, if any.
    weight_decay = config.weight_decay + optimizer_weight_decay(config)
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=config.lr,
            momentum=config.momentum,
            nesterov=config.nesterov,
            weight_decay=weight_decay,
            # One fused kernel for the whole update instead of a loop over parameters; the
            # same update rule (bench/resnet_throughput.py measures what it buys).
            fused=True,
        )
    if config.optimizer == "adam":
        beta1, beta2 = config.adam_betas
        return torch.optim.Adam(
            params,
            lr=config.lr,
            betas=(beta1, beta2),
            eps=config.adam_eps,
            weight_decay=weight_decay,
        )
    raise ValueError(f"unknown optimizer {config.optimizer!r}")
