"""The all-reduce micro-benchmark's configuration (task 0a, `allreduce-micro`).

Like TrainConfig it is the runner-to-workload contract, travels as JSON and is validated
here, before anything runs; unlike it, there is no model, data or target: the benchmark
measures the network. No torch import (the runner loads it on its start-up path).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.config import ConfigError, JsonConfig

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class AllReduceMicroConfig(JsonConfig):
    min_elements: int = 1
    max_elements: int = 100_000_000  # 400 MB in fp32; on CPU: --set max_elements=1000000
    sizes_per_decade: int = 1  # log-spaced sizes: 1, 10, 100, ... with 1
    dtypes: tuple[str, ...] = DTYPES
    num_iters: int = 20  # timed all-reduces per size and dtype (nccl-tests' default)
    num_warmup_iters: int = 5
    # Large tensors on slow links: fewer timed iterations (at least one) past this budget.
    max_time_per_size_s: float = 5.0
    dist_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for key in ("min_elements", "max_elements", "sizes_per_decade", "num_iters"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(key, f"must be a positive integer, got {getattr(self, key)!r}")
        if self.max_elements < self.min_elements:
            raise ConfigError("max_elements", f"must be at least min_elements={self.min_elements}")
        if self.num_warmup_iters < 0:
            raise ConfigError("num_warmup_iters", "must not be negative")
        unknown = [d for d in self.dtypes if d not in DTYPES]
        if unknown or not self.dtypes:
            raise ConfigError("dtypes", f"expected a comma-separated list of {', '.join(DTYPES)}")
        for key in ("max_time_per_size_s", "dist_timeout_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(key, "must be positive")


def log_sizes(min_elements: int, max_elements: int, per_decade: int) -> list[int]:
    """Log-spaced element counts from min to max, both included, without repeats."""
    sizes, k = set(), 0
    while (size := round(10 ** (k / per_decade))) <= max_elements:
        if size >= min_elements:
            sizes.add(size)
        k += 1
    return sorted(sizes | {min_elements, max_elements})
