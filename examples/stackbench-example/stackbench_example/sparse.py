"""The top-k exchange itself (imports torch): see topk.py."""

from __future__ import annotations

import math

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from workloads.strategies.base import Collectives, taken_carried


class TopKExchange:
    """A GradientExchange (workloads/strategies/base.py) that keeps its error feedback: the
    part of each gradient it did not send, added to the next one."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.residual: torch.Tensor | None = None

    def __call__(self, grads: list[torch.Tensor], collectives: Collectives) -> None:
        carried = taken_carried(collectives)  # which parameters any rank used: averaged
        if carried is not None:
            collectives.all_reduce_mean(carried)
        if not grads:
            return
        flat = _flatten_dense_tensors(grads)
        if self.residual is None:
            self.residual = torch.zeros_like(flat)
        flat.add_(self.residual)
        k = max(1, math.ceil(self.ratio * flat.numel()))
        index = flat.abs().topk(k, sorted=False).indices
        values = flat[index]
        self.residual.copy_(flat)
        self.residual[index] = 0.0  # what was sent is no longer owed
        all_index = collectives.all_gather(index).reshape(-1)
        all_values = collectives.all_gather(values).reshape(-1)
        dense = torch.zeros_like(flat)
        dense.index_add_(0, all_index, all_values)
        dense.div_(collectives_world(all_values, values))
        for grad, synced in zip(grads, _unflatten_dense_tensors(dense, grads), strict=True):
            grad.copy_(synced)


def collectives_world(gathered: torch.Tensor, own: torch.Tensor) -> int:
    """The number of workers, as the gather's size says (every worker sends k values)."""
    return gathered.numel() // own.numel()
