"""Strategies that average gradients after backward, on the plain model (no DDP).

Nothing overlaps backward here, so timing is direct: the backward lap ends when
loss.backward() returns, and the communication lap spans the gradient exchange, including
flattening, averaging on rank 0 and copying back. The exchanges are pure functions of the
gradients and a Collectives:
- `allreduce`: one all-reduce of all gradients flattened into one buffer (MLBench's
  CentralizedSGD, by_layer=False); a buffer of a few kB (a linear model's) is all-gathered
  and averaged locally instead, in half the round trips (base.flat_all_reduce_mean).
- `allreduce-per-param`: one all-reduce per parameter tensor (CS744 task 2b).
- `gather-scatter`: per parameter tensor, rank 0 gathers every rank's gradient, averages and
  scatters the mean back (CS744 task 2a).
BatchNorm buffers are explicitly broadcast from rank 0 before evaluation: the statistics DDP
evaluates with, at a fraction of DDP's cost (a broadcast at every forward), since
training-mode BatchNorm never reads its running statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from workloads.strategies.base import (
    Collectives,
    GradientExchange,
    LocalGradients,
    UsageCarrier,
    broadcast_buffers,
    broadcast_state,
    carried_back,
    carry_on,
    flat_all_reduce_mean,
    trainable,
)
from workloads.telemetry.timing import StepTimer

if TYPE_CHECKING:
    from workloads.adaptive.probes import GradientProbe


def per_tensor_all_reduce_mean(grads: list[torch.Tensor], collectives: Collectives) -> None:
    for grad in grads[:-1]:
        collectives.all_reduce_mean(grad)
    if grads:  # the last collective takes along what the exchange carries (UsageCarrier)
        sent = carry_on(grads[-1], collectives)
        collectives.all_reduce_mean(sent)
        carried_back(grads[-1], sent, collectives)


def gather_scatter_mean(grads: list[torch.Tensor], collectives: Collectives) -> None:
    for grad in grads[:-1]:
        gather_scatter_one(grad, collectives)
    if grads:  # the last collectives take along what the exchange carries (UsageCarrier)
        sent = carry_on(grads[-1], collectives)
        gather_scatter_one(sent, collectives)
        carried_back(grads[-1], sent, collectives)


def gather_scatter_one(tensor: torch.Tensor, collectives: Collectives) -> None:
    """`tensor` replaced by its mean over ranks, taken on rank 0 and scattered back."""
    gathered = collectives.gather(tensor, dst=0)
    parts = None if gathered is None else mean_for_each(gathered)
    collectives.scatter(tensor, parts, src=0)


def mean_for_each(gathered: list[torch.Tensor]) -> list[torch.Tensor]:
    """The mean of the gathered tensors, once per rank (scatter sends parts[r] to rank r)."""
    mean = torch.stack(gathered).mean(dim=0)
    return [mean] * len(gathered)


class GradientSyncStrategy(LocalGradients):
    def __init__(
        self,
        model: nn.Module,
        collectives: Collectives,
        exchange: GradientExchange,
        probe: GradientProbe | None = None,
    ) -> None:
        self.inner = self.module = model
        self._collectives = collectives
        self._params = trainable(model)
        self._usage = UsageCarrier(self._params)
        self._exchange = probed(exchange, probe)
        broadcast_state(model, collectives)

    def synchronize(self, timer: StepTimer) -> None:
        if self.syncing:
            self._usage.exchange(self._exchange, self._collectives)
        timer.lap("communication")

    def after_step(self, timer: StepTimer) -> None:
        return None

    def sync_buffers(self) -> None:
        broadcast_buffers(self.inner, self._collectives)


def probed(exchange: GradientExchange, probe: GradientProbe | None) -> GradientExchange:
    """`exchange`, the gradients read before and after it on monitoring steps (the
    noise-scale probe, workloads/adaptive/probes.py): booked in the communication lap."""
    return exchange if probe is None else probe.wrap_exchange(exchange)


def flat_all_reduce(
    model: nn.Module, collectives: Collectives, probe: GradientProbe | None = None
) -> GradientSyncStrategy:
    return GradientSyncStrategy(model, collectives, flat_all_reduce_mean, probe)


def per_param_all_reduce(
    model: nn.Module, collectives: Collectives, probe: GradientProbe | None = None
) -> GradientSyncStrategy:
    return GradientSyncStrategy(model, collectives, per_tensor_all_reduce_mean, probe)


def gather_scatter(
    model: nn.Module, collectives: Collectives, probe: GradientProbe | None = None
) -> GradientSyncStrategy:
    return GradientSyncStrategy(model, collectives, gather_scatter_mean, probe)
