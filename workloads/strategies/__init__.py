"""Communication strategies: how workers agree on a model each step (shared/BENCHMARKS.md).

Each strategy owns the backward pass of a step and any communication after the optimizer
step, because where communication happens (inside backward for the DDP-based ones, after it
for the others, after the optimizer for model averaging) decides how its time is attributed;
each module says how it measures its exposed communication and how it handles BatchNorm
buffers:
- ddp.py: `ddp`, `fp16-compress`, `bf16-compress`, `powersgd` (DDP communication hooks).
- gradients.py: `allreduce`, `allreduce-per-param`, `gather-scatter` (after backward).
- averaging.py: `model-averaging` (post-local SGD).
- local.py: what any of them becomes in a single process (nothing to communicate).
Exact strategies (ddp, allreduce, allreduce-per-param, gather-scatter) give every worker the
mean gradient, as DDP does; the compressed ones approximate it; model averaging averages
weights instead. The optimizer is separate (workloads/optim.py): "centralized Adam" is Adam
after any gradient-averaging strategy.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn

from workloads.config import TrainConfig
from workloads.strategies import averaging, ddp, gradients
from workloads.strategies.base import Collectives, Strategy
from workloads.strategies.local import LocalStrategy
from workloads.timing import Clock

__all__ = ["Collectives", "Strategy", "build"]


def effective_name(config: TrainConfig, world_size: int) -> str:
    """The strategy that runs: the configured one, or `local` in a single process."""
    return "local" if world_size == 1 else config.strategy


def build(
    config: TrainConfig, model: nn.Module, clock: Clock, collectives: Collectives | None = None
) -> Strategy:
    """The configured strategy around `model` (collectives: the network boundary, for tests)."""
    comm = collectives or Collectives()
    name = config.strategy
    if effective_name(config, dist.get_world_size()) == "local":
        return LocalStrategy(model)
    if name == "ddp":
        return ddp.ddp(model, clock, comm)
    if name == "fp16-compress":
        return ddp.fp16_compress(model, clock, comm)
    if name == "bf16-compress":
        return ddp.bf16_compress(model, clock, comm)
    if name == "powersgd":
        return ddp.powersgd(
            model,
            clock,
            comm,
            rank=config.powersgd_rank,
            start_iter=config.powersgd_start_iter,
            seed=config.seed,
        )
    if name == "allreduce":
        return gradients.flat_all_reduce(model, comm)
    if name == "allreduce-per-param":
        return gradients.per_param_all_reduce(model, comm)
    if name == "gather-scatter":
        return gradients.gather_scatter(model, comm)
    if name == "model-averaging":
        return averaging.ModelAveragingStrategy(
            model, comm, config.averaging_period, config.averaging_warmup_steps
        )
    raise ValueError(f"unknown strategy {name!r}")
