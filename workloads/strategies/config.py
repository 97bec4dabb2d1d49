"""Communication-strategy configs: which strategy a run uses and its options, one option of
the choice STRATEGIES (key `strategy`) per set of options, each building its strategy.

The strategies without options share one config; PowerSGD and model averaging have their
own, so `powersgd_rank` is a key only with `strategy=powersgd`. Torch-free: the strategies
are imported only to build one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.components import Choice, Component
from workloads.fields import setting

if TYPE_CHECKING:
    from torch import nn

    from workloads.strategies.base import Collectives, Strategy
    from workloads.timing import Clock

# Strategies that give every worker the mean gradient, as DDP does: choosing among them
# changes the system, not the algorithm (the runner keeps such a switch closed division).
# Compressed strategies and model averaging change the math.
EXACT_STRATEGIES = frozenset({"ddp", "allreduce", "allreduce-per-param", "gather-scatter"})


@dataclass(frozen=True, kw_only=True)
class StrategyConfig(Component):
    name: str  # each option narrows it to its Literal: the key `strategy`

    def build(self, model: nn.Module, clock: Clock, comm: Collectives, seed: int) -> Strategy:
        """The strategy around `model` (`seed`: the run's, for randomized strategies)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class PlainStrategy(StrategyConfig):
    """The strategies that take no options."""

    name: Literal[
        "ddp", "allreduce", "allreduce-per-param", "gather-scatter", "fp16-compress",
        "bf16-compress",
    ] = "ddp"  # fmt: skip

    def build(self, model: nn.Module, clock: Clock, comm: Collectives, seed: int) -> Strategy:
        from workloads.strategies import ddp, gradients

        if self.name == "ddp":
            return ddp.ddp(model, clock, comm)
        if self.name == "fp16-compress":
            return ddp.fp16_compress(model, clock, comm)
        if self.name == "bf16-compress":
            return ddp.bf16_compress(model, clock, comm)
        if self.name == "allreduce":
            return gradients.flat_all_reduce(model, comm)
        if self.name == "allreduce-per-param":
            return gradients.per_param_all_reduce(model, comm)
        return gradients.gather_scatter(model, comm)


@dataclass(frozen=True, kw_only=True)
class PowerSgdConfig(StrategyConfig):
    """Low-rank gradient compression with error feedback (torch's PowerSGD hook)."""

    name: Literal["powersgd"] = "powersgd"
    powersgd_rank: int = setting(1, ge=1, le=1024)  # r; torch's PowerSGDState default
    # Plain all-reduce before this step (torch's default); torch's PowerSGD needs at least
    # two plain steps before error feedback and warm start work.
    powersgd_start_iter: int = setting(1000, ge=2, le=10**9)

    def build(self, model: nn.Module, clock: Clock, comm: Collectives, seed: int) -> Strategy:
        from workloads.strategies import ddp

        return ddp.powersgd(
            model, clock, comm, rank=self.powersgd_rank, start_iter=self.powersgd_start_iter,
            seed=seed,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ModelAveragingConfig(StrategyConfig):
    """A local step, then the weights averaged every `averaging_period` steps."""

    name: Literal["model-averaging"] = "model-averaging"
    averaging_period: int = setting(1, ge=1, le=10**6)
    averaging_warmup_steps: int = setting(0, ge=0, le=10**9)  # all-reduce gradients first

    def build(self, model: nn.Module, clock: Clock, comm: Collectives, seed: int) -> Strategy:
        from workloads.strategies.averaging import ModelAveragingStrategy

        return ModelAveragingStrategy(
            model, comm, self.averaging_period, self.averaging_warmup_steps
        )


STRATEGIES = Choice("strategy", (PlainStrategy, PowerSgdConfig, ModelAveragingConfig))
