"""The all-reduce micro-benchmark's configuration (task 0a, `allreduce-micro`).

Like TrainConfig it is the runner-to-workload contract, travels as JSON nested by component
and is validated here, before anything runs: what to measure, and the run limits every
workload has (RunLimits: its time budget bounds the measurements, and the runner's job
deadline follows from it). Unlike it, there is no model, data or target: the benchmark
measures the network. No torch import (the runner loads it on its start-up path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from workloads.configuration.components import Component, Composite
from workloads.configuration.fields import ConfigError, setting
from workloads.configuration.train_config import RunLimits

Dtype = Literal["float32", "float16", "bfloat16"]
DTYPES: tuple[Dtype, ...] = ("float32", "float16", "bfloat16")
MAX_ELEMENTS = 2**34  # 64 GiB of fp32: more than any device holds


@dataclass(frozen=True, kw_only=True)
class MeasurementConfig(Component):
    """Which all-reduces to time, and how many times each."""

    min_elements: int = setting(1, ge=1, le=MAX_ELEMENTS)
    # 400 MB in fp32; on CPU: --set max_elements=1000000
    max_elements: int = setting(100_000_000, ge=1, le=MAX_ELEMENTS)
    sizes_per_decade: int = setting(1, ge=1, le=100)  # log-spaced sizes: 1, 10, 100, ... with 1
    dtypes: tuple[Dtype, ...] = DTYPES
    num_iters: int = setting(20, ge=1, le=10**6)  # timed all-reduces per size and dtype
    num_warmup_iters: int = setting(5, ge=0, le=10**6)
    # Large tensors on slow links: fewer timed iterations (at least one) past this budget.
    max_time_per_size_s: float = setting(5.0, gt=0, le=3600)

    def validate(self) -> None:
        if self.max_elements < self.min_elements:
            raise ConfigError("max_elements", f"must be at least min_elements={self.min_elements}")
        if not self.dtypes:
            raise ConfigError("dtypes", f"expected a comma-separated list of {', '.join(DTYPES)}")


@dataclass(frozen=True, kw_only=True)
class AllReduceMicroConfig(Composite):
    VERSION: ClassVar[int] = 2  # 1 was one flat object

    measure: MeasurementConfig = field(default_factory=MeasurementConfig)
    run: RunLimits = field(default_factory=RunLimits)


def log_sizes(min_elements: int, max_elements: int, per_decade: int) -> list[int]:
    """Log-spaced element counts from min to max, both included, without repeats."""
    sizes, k = set(), 0
    while (size := round(10 ** (k / per_decade))) <= max_elements:
        if size >= min_elements:
            sizes.add(size)
        k += 1
    return sorted(sizes | {min_elements, max_elements})
