"""Communication-strategy configs: which strategy a run uses and its options, one option of
the choice STRATEGIES (key `strategy`) per set of options, each building its strategy.

The strategies without options share one config; PowerSGD and model averaging have their
own, so `powersgd_rank` is a key only with `strategy=powersgd`. `adaptive-sync` switches
between the exact all-reduce and model averaging while training, as the `sync` policy
decides (workloads/adaptive/sync.py; its thresholds are the adaptive component's keys).
Every build takes the run's monitor, when it has one, so that the strategy's gradient
exchange is read by the noise-scale probe. Torch-free: the strategies are imported only to
build one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.components import Choice, Component
from workloads.configuration.fields import setting
from workloads.plugins import points

if TYPE_CHECKING:
    from torch import nn

    from workloads.adaptive.monitors import Monitor
    from workloads.strategies.base import Collectives, Strategy
    from workloads.telemetry.timing import Clock

# Strategies that give every worker the mean gradient, as DDP does: choosing among them
# changes the system, not the algorithm (the runner keeps such a switch closed division).
# Compressed strategies and model averaging change the math.
EXACT_STRATEGIES = frozenset({"ddp", "allreduce", "allreduce-per-param", "gather-scatter"})
# Built on DistributedDataParallel: its process group cannot be replaced under it (an
# elastic run re-forms the group; docs/adaptive-elastic.md).
DDP_STRATEGIES = frozenset({"ddp", "fp16-compress", "bf16-compress", "powersgd"})


@dataclass(frozen=True, kw_only=True)
class StrategyConfig(Component):
    name: str  # each option narrows it to its Literal: the key `strategy`

    def build(
        self,
        model: nn.Module,
        clock: Clock,
        comm: Collectives,
        seed: int,
        monitor: Monitor | None = None,
    ) -> Strategy:
        """The strategy around `model` (`seed`: the run's, for randomized strategies;
        `monitor`: the run's monitors, whose probe reads the gradient exchange)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class PlainStrategy(StrategyConfig):
    """The strategies that take no options."""

    name: Literal[
        "ddp", "allreduce", "allreduce-per-param", "gather-scatter", "fp16-compress",
        "bf16-compress",
    ] = "ddp"  # fmt: skip

    def build(
        self,
        model: nn.Module,
        clock: Clock,
        comm: Collectives,
        seed: int,
        monitor: Monitor | None = None,
    ) -> Strategy:
        from workloads.strategies import ddp, gradients

        probe = monitor.probe if monitor is not None else None
        if self.name == "ddp":
            return ddp.ddp(model, clock, comm, probe)
        if self.name == "fp16-compress":
            return ddp.fp16_compress(model, clock, comm, probe)
        if self.name == "bf16-compress":
            return ddp.bf16_compress(model, clock, comm, probe)
        if self.name == "allreduce":
            return gradients.flat_all_reduce(model, comm, probe)
        if self.name == "allreduce-per-param":
            return gradients.per_param_all_reduce(model, comm, probe)
        return gradients.gather_scatter(model, comm, probe)


@dataclass(frozen=True, kw_only=True)
class PowerSgdConfig(StrategyConfig):
    """Low-rank gradient compression with error feedback (torch's PowerSGD hook)."""

    name: Literal["powersgd"] = "powersgd"
    powersgd_rank: int = setting(1, ge=1, le=1024)  # r; torch's PowerSGDState default
    # Plain all-reduce before this step (torch's default); torch's PowerSGD needs at least
    # two plain steps before error feedback and warm start work.
    powersgd_start_iter: int = setting(1000, ge=2, le=10**9)

    def build(
        self,
        model: nn.Module,
        clock: Clock,
        comm: Collectives,
        seed: int,
        monitor: Monitor | None = None,
    ) -> Strategy:
        from workloads.strategies import ddp

        return ddp.powersgd(
            model, clock, comm, rank=self.powersgd_rank, start_iter=self.powersgd_start_iter,
            seed=seed, probe=monitor.probe if monitor is not None else None,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ModelAveragingConfig(StrategyConfig):
    """A local step, then the weights averaged every `averaging_period` steps."""

    name: Literal["model-averaging"] = "model-averaging"
    averaging_period: int = setting(1, ge=1, le=10**6)
    averaging_warmup_steps: int = setting(0, ge=0, le=10**9)  # all-reduce gradients first

    def build(
        self,
        model: nn.Module,
        clock: Clock,
        comm: Collectives,
        seed: int,
        monitor: Monitor | None = None,
    ) -> Strategy:
        # No probe: after warm-up no averaged gradient exists, so there is no noise scale.
        from workloads.strategies.averaging import ModelAveragingStrategy

        return ModelAveragingStrategy(
            model, comm, self.averaging_period, self.averaging_warmup_steps
        )


@dataclass(frozen=True, kw_only=True)
class AdaptiveSyncStrategyConfig(StrategyConfig):
    """Exact all-reduce or model averaging, switched by `--set policy=sync` (it starts exact;
    the averaging period starts at sync_min_period, workloads/adaptive/config.py)."""

    name: Literal["adaptive-sync"] = "adaptive-sync"

    def build(
        self,
        model: nn.Module,
        clock: Clock,
        comm: Collectives,
        seed: int,
        monitor: Monitor | None = None,
    ) -> Strategy:
        from workloads.adaptive.sync import AdaptiveSyncStrategy, SyncState

        # The sync policy's averaging_period knob replaces the period at its first decision;
        # until then the mode is exact and the period unused.
        return AdaptiveSyncStrategy(
            model,
            comm,
            SyncState("exact", 2),
            probe=monitor.probe if monitor is not None else None,
            on_divergence=monitor.note_divergence if monitor is not None else None,
        )


for _option in (PlainStrategy, PowerSgdConfig, ModelAveragingConfig, AdaptiveSyncStrategyConfig):
    points.STRATEGIES.register(_option)
STRATEGIES = Choice("strategy", points.STRATEGIES, StrategyConfig)
