"""`local`: what every strategy becomes in a single process: nothing to communicate.

One worker already holds the mean gradient, so wrapping it in DDP (a reducer, bucket copies
and an all-reduce over a group of one) would charge the single-process baseline for
machinery it does not need. The summary records the strategy that actually ran.
"""

from __future__ import annotations

from torch import nn

from workloads.strategies.base import LocalGradients
from workloads.telemetry.timing import StepTimer


class LocalStrategy(LocalGradients):
    name = "local"

    def __init__(self, model: nn.Module) -> None:
        self.inner = self.module = model

    def synchronize(self, timer: StepTimer) -> None:
        timer.lap("communication")  # zero-length: phases keep the same shape everywhere

    def after_step(self, timer: StepTimer) -> None:
        return None

    def sync_buffers(self) -> None:
        return None
