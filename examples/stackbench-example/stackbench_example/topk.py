"""Top-k gradient sparsification with error feedback (Stich et al. 2018; Lin et al. 2018).

Each worker sends only the `topk_ratio` largest-magnitude entries of its gradient (plus
what it left out before: the error feedback, which keeps the dropped mass from being lost
and makes the method converge like SGD); the workers all-gather each other's (index, value)
pairs and average them into a dense gradient. The configuration is torch-free (the runner
reads it); the exchange imports torch when built, in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from workloads.configuration.fields import setting
from workloads.plugins import points
from workloads.strategies.config import StrategyConfig

if TYPE_CHECKING:
    from torch import nn

    from workloads.adaptive.monitors import Monitor
    from workloads.strategies.base import Collectives, Strategy
    from workloads.telemetry.timing import Clock


@points.STRATEGIES.register
@dataclass(frozen=True, kw_only=True)
class TopKConfig(StrategyConfig):
    name: Literal["topk"] = "topk"
    topk_ratio: float = setting(0.01, gt=0, le=1)  # of the gradient's entries each worker sends

    def build(
        self,
        model: nn.Module,
        clock: Clock,
        comm: Collectives,
        seed: int,
        monitor: Monitor | None = None,
    ) -> Strategy:
        from stackbench_example.sparse import TopKExchange
        from workloads.strategies.gradients import GradientSyncStrategy

        probe = monitor.probe if monitor is not None else None
        return GradientSyncStrategy(model, comm, TopKExchange(self.topk_ratio), probe)
