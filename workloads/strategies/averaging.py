"""`model-averaging`: local SGD steps, then the weights averaged across workers.

Post-local SGD (Lin et al. 2018): for the first `averaging_warmup_steps` steps the gradients
are all-reduced (synchronous SGD, the models stay identical); after that every worker steps
on its own gradients and every `averaging_period`-th local step the models are averaged. With
period 1 this is MLBench's model-averaging path (local step, then average).

Why not torch's PostLocalSGDOptimizer + PeriodicModelAverager: their averaging calls
dist.all_reduce directly, so it would bypass the Collectives boundary that lets a test prove
how communication is timed; they average only parameters that have gradients, leaving
BatchNorm statistics per worker; and the warm-up needs DDP, whose buffer broadcast at every
forward would override local statistics. The schedule here follows theirs (warm-up steps of
gradient all-reduce, then a period), and the averaging is the same flattened mean all-reduce.

Timing: averaging happens after optimizer.step and is its own communication lap; in warm-up
the gradient all-reduce is the communication lap after backward.
BatchNorm: running statistics are averaged together with the weights (floating-point buffers;
the integer batch counters are equal on every rank), and once more before evaluation, so
every rank evaluates the same averaged model.
"""

from __future__ import annotations

import torch
from torch import nn

from workloads.strategies.base import (
    Collectives,
    LocalGradients,
    UsageCarrier,
    broadcast_state,
    flat_all_reduce_mean,
    trainable,
)
from workloads.telemetry.timing import StepTimer


def averaging_due(steps_done: int, warmup_steps: int, period: int) -> bool:
    """Whether to average after local step `steps_done` (1-based, counting warm-up steps)."""
    local_steps = steps_done - warmup_steps
    return local_steps > 0 and local_steps % period == 0


@torch.no_grad()
def average_model(model: nn.Module, collectives: Collectives) -> None:
    """Parameters and floating-point buffers replaced by their mean over ranks."""
    state = [p.data for p in model.parameters()]
    state += [b for b in model.buffers() if b.is_floating_point()]
    flat_all_reduce_mean(state, collectives)


class ModelAveragingStrategy(LocalGradients):
    def __init__(
        self, model: nn.Module, collectives: Collectives, period: int, warmup_steps: int
    ) -> None:
        self.inner = self.module = model
        self._collectives = collectives
        self._params = trainable(model)
        self._usage = UsageCarrier(self._params)
        self._period = period
        self._warmup_steps = warmup_steps
        self._steps_done = 0
        broadcast_state(model, collectives)

    def resume(self, steps_done: int) -> None:
        """Go on from the run's step `steps_done`: an elastic change builds the strategy anew,
        and its warm-up and averaging period count from the run's start, not the change."""
        self._steps_done = steps_done

    def synchronize(self, timer: StepTimer) -> None:
        if self.syncing and self._steps_done < self._warmup_steps:
            self._usage.exchange(flat_all_reduce_mean, self._collectives)
        timer.lap("communication")

    def after_step(self, timer: StepTimer) -> None:
        self._steps_done += 1
        if averaging_due(self._steps_done, self._warmup_steps, self._period):
            average_model(self.inner, self._collectives)
            timer.lap("communication")

    def sync_buffers(self) -> None:
        average_model(self.inner, self._collectives)
