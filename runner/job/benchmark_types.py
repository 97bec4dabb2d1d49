"""What a benchmark entry is (Benchmark, MicroBenchmark) and which keys are free in the closed
division: apart from benchmarks.py, which registers ours, so that the extension point checks
an entry's type (workloads/plugins/points.py) without importing every benchmark's components
(which import the registries). runner/job/benchmarks.py re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.configuration.run_config import ExecutionConfig, RunConfig

if TYPE_CHECKING:
    from workloads.configuration.micro_config import AllReduceMicroConfig
    from workloads.configuration.train_config import TrainConfig

TRAIN_MODULE = "workloads.train"  # the workload entry of training benchmarks

# How a run is driven (and where its data are read from) and how a step is executed, not
# what it trains: changing these never makes a run open division (MLPerf's closed division
# allows mixed precision too). Derived from the components, so a new run or execution
# control is free without being listed here.
RUN_CONTROLS = frozenset(f.name for f in fields(RunConfig)) | {"data_dir"}
EXECUTION_CONTROLS = frozenset(f.name for f in fields(ExecutionConfig))
FREE_KEYS = RUN_CONTROLS | EXECUTION_CONTROLS


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
    # Set when the task fixes the global batch whatever the number of workers (CS744): the
    # per-worker batch_size is then global_batch_size / workers, resolved at submit time.
    global_batch_size: int | None = None
    # Its closed-division compliance rules (an mlperf-logging checker YAML, checked before
    # workloads/compliance/common.yaml); None: `runner check` has no rules for it.
    ruleset: Path | None = None

    def __post_init__(self) -> None:
        unknown = self.tunables - set(self.config.flat_keys())
        if unknown:
            raise ValueError(f"{self.name}: tunables name keys it lacks: {sorted(unknown)}")
        free = self.tunables & FREE_KEYS
        if free:
            raise ValueError(f"{self.name}: {sorted(free)} are free anyway, not tunables")


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
        return frozenset(self.config.flat_keys())


AnyBenchmark = Benchmark | MicroBenchmark
