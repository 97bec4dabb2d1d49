"""What a policy entry is (PolicySpec) and what it is built from (PolicyContext): apart from
policies.py, which registers ours, so that the extension point can check an entry's type
(workloads/plugins/points.py) without importing the policies that register into it.
Torch-free; imports nothing of ours at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads.adaptive.config import AdaptiveConfig
    from workloads.optimization.optim import OptimizerConfig

Knobs = dict[str, Any]  # knob -> initial value (int, float or str)


@dataclass(frozen=True)
class PolicyContext:
    """What a policy is built from: the adaptive component, the optimizer's, and the run's
    starting numbers."""

    adaptive: AdaptiveConfig
    optimizer: OptimizerConfig
    base_global_batch: int  # B0: samples per update over the starting workers
    world_size: int  # the starting workers
    reading_decay: float  # the monitors' EMA decay per reading (monitors.MonitorConfig)


@dataclass(frozen=True)
class PolicySpec:
    name: str
    knobs: tuple[str, ...]  # what it owns, in order (what a run's summary reports)
    build: Callable[[PolicyContext], tuple[Any, Knobs]]  # -> (Policy, initial knob values)
    description: str = ""
