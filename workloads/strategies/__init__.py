"""Communication strategies: how workers agree on a model each step (docs/benchmarks.md).

Each strategy owns the backward pass of a step and any communication after the optimizer
step, because where communication happens (inside backward for the DDP-based ones, after it
for the others, after the optimizer for model averaging) decides how its time is attributed;
each module says how it measures its exposed communication and how it handles BatchNorm
buffers:
- ddp.py: `ddp`, `fp16-compress`, `bf16-compress`, `powersgd` (DDP communication hooks).
- gradients.py: `allreduce`, `allreduce-per-param`, `gather-scatter` (after backward).
- averaging.py: `model-averaging` (post-local SGD).
- `adaptive-sync`: exact all-reduce or model averaging, switched while training
  (workloads/adaptive/sync.py, driven by the `sync` policy).
- local.py: what any of them becomes in a single process (nothing to communicate).
- config.py: the configs that name them and their options (torch-free).
- base.py: the Strategy protocol and Collectives, the network boundary.
Exact strategies (ddp, allreduce, allreduce-per-param, gather-scatter) give every worker the
mean gradient, as DDP does; the compressed ones approximate it; model averaging averages
weights instead. The optimizer is separate (workloads/optimization/optim.py): "centralized Adam" is
Adam after any gradient-averaging strategy. This module imports torch only to build a strategy,
so the configs beside it stay importable without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from workloads.adaptive.monitors import Monitor
    from workloads.strategies.base import Collectives, Strategy
    from workloads.strategies.config import StrategyConfig
    from workloads.telemetry.timing import Clock

__all__ = ["build", "effective_name"]


def effective_name(config: StrategyConfig, world_size: int) -> str:
    """The strategy that runs: the configured one, or `local` in a single process."""
    return "local" if world_size == 1 else config.name


def build(
    config: StrategyConfig,
    seed: int,
    model: nn.Module,
    clock: Clock,
    collectives: Collectives | None = None,
    monitor: Monitor | None = None,
) -> Strategy:
    """Strategy `config` around `model` (seed: the run's, for randomized strategies;
    collectives: the network boundary, for tests; monitor: the run's monitors, whose probe
    reads the strategy's gradient exchange)."""
    import torch.distributed as dist

    from workloads.strategies.base import Collectives
    from workloads.strategies.local import LocalStrategy

    if effective_name(config, dist.get_world_size()) == "local":
        return LocalStrategy(model)
    comm = collectives or Collectives()
    return config.build(model, clock, comm, seed, monitor)
