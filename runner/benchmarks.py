"""The benchmark registry: every benchmark a user can name, as plain frozen data.

A benchmark fixes the closed division of one task (shared/BENCHMARKS.md): model, data,
algorithm, hyperparameters and target. Only the keys in `tunables` may change and stay
closed; any other `--set` makes the run open division. Variants are `dataclasses.replace`
of a base. No torch here: `runner benchmarks` must start instantly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType

from workloads.config import TrainConfig
from workloads.microconfig import AllReduceMicroConfig

TRAIN_MODULE = "workloads.train"  # the workload entry of training benchmarks

# MLPerf's tunables: batch size and the LR schedule's parameters (shared/BENCHMARKS.md).
SGD_TUNABLES = frozenset({"batch_size", "lr", "warmup_epochs", "lr_milestones", "lr_gamma"})
# How a run is driven, not what it trains: changing these never makes a run open division.
RUN_CONTROLS = frozenset(
    {"seed", "data_dir", "dist_timeout_s", "time_budget_s", "stop_at_target", "max_epochs"}
)
# Strategies that give every worker the mean gradient, as DDP does: choosing among them changes
# the system, not the algorithm (the strategy is a dimension the suite compares), so it keeps a
# run closed. Compressed strategies and model averaging change the math: open division.
EXACT_STRATEGIES = frozenset({"ddp", "allreduce", "allreduce-per-param", "gather-scatter"})


@dataclass(frozen=True)
class Benchmark:
    name: str
    task: str
    description: str
    config: TrainConfig
    light_target: float  # the "light goal", for quick checks
    tunables: frozenset[str]
    default_workers: int = 1
    default_runs: int = 1
    module: str = TRAIN_MODULE

    def __post_init__(self) -> None:
        unknown = self.tunables - set(self.config.to_dict())
        if unknown:
            raise ValueError(f"{self.name}: tunables name unknown keys {sorted(unknown)}")


@dataclass(frozen=True)
class MicroBenchmark:
    """A measurement of the stack itself, not a training task: no model, target or division
    rules (every setting is a tunable, so every run is closed division)."""

    name: str
    task: str
    description: str
    config: AllReduceMicroConfig
    module: str
    default_workers: int = 2
    default_runs: int = 1

    @property
    def tunables(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self.config))


AnyBenchmark = Benchmark | MicroBenchmark


CNN_DIGITS = Benchmark(
    name="cnn-digits",
    task="image classification (quickstart)",
    description="Small CNN on scikit-learn's digits (1,797 8x8 images); runs in seconds.",
    config=TrainConfig(
        model="cnn-digits",
        dataset="digits",
        target_metric="top1_accuracy",
        target_value=0.95,
        max_epochs=30,
        batch_size=32,
        lr=0.05,
        momentum=0.9,
        weight_decay=1e-4,
        lr_scaling="linear",
        warmup_epochs=1.0,
        strategy="ddp",
    ),
    light_target=0.90,
    tunables=SGD_TUNABLES,
    default_workers=2,
    default_runs=1,
)

ALLREDUCE_MICRO = MicroBenchmark(
    name="allreduce-micro",
    task="communication micro-benchmark (0a)",
    description="All-reduce latency, algorithm and bus bandwidth per tensor size and dtype.",
    config=AllReduceMicroConfig(),
    module="workloads.micro",
)

BENCHMARKS: Mapping[str, AnyBenchmark] = MappingProxyType(
    {b.name: b for b in (CNN_DIGITS, ALLREDUCE_MICRO)}
)
