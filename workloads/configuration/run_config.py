"""How a run is driven and how its steps execute (RunLimits, RunConfig, ExecutionConfig): the
components that are free in the closed division. Apart from config.py (which composes every
component, each registry's included) so that the benchmark entries' type
(runner/job/benchmark_types.py) derives its free keys without importing the registries.
workloads/configuration/train_config.py re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workloads.configuration.components import Component
from workloads.configuration.fields import setting

DAY_S = 86_400.0


@dataclass(frozen=True, kw_only=True)
class RunLimits(Component):
    """How long a workload's processes may take: every workload has these."""

    # "Accuracy after time": stop at this wall time (None: no budget).
    time_budget_s: float | None = setting(None, gt=0, le=30 * DAY_S)
    dist_timeout_s: float = setting(300.0, gt=0, le=DAY_S)  # of the process group's collectives


@dataclass(frozen=True, kw_only=True)
class RunConfig(RunLimits):
    """How a training run is driven: free in the closed division (runner/job/benchmarks.py)."""

    max_epochs: int = setting(ge=1, le=100_000)
    seed: int = setting(0, ge=0, le=2**31 - 1)
    eval_every_epochs: int = setting(1, ge=1, le=100_000)
    stop_at_target: bool = True


@dataclass(frozen=True, kw_only=True)
class ExecutionConfig(Component):
    """How a step is executed, not what it computes: free in the closed division (MLPerf's
    closed division allows mixed precision too)."""

    # Of the model and its input batches; channels_last applies to image models.
    memory_format: Literal["contiguous", "channels_last"] = "contiguous"
    # torch.compile, compiled before the clock (workloads/runtime/compiling.py).
    compile_model: bool = False
    # "auto": bf16 autocast for the translation models on CUDA, fp32 otherwise
    # (workloads/runtime/precision.py).
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # At most this many intra-op CPU threads per process (None: what torch or the launcher
    # chose; torchrun gives each of several workers one). A model whose kernels are tiny (a
    # linear model's) only pays for threads: torch splits some of them (log-sigmoid, the fused
    # SGD update) across threads even at a few thousand elements, each split a wake-up and a
    # join, and on a busy machine a wait for the other thread's turn.
    max_cpu_threads: int | None = setting(None, ge=1, le=1024)
