"""Communication strategies: how gradients become the same on every worker each step.

Each strategy owns the backward pass of a step, because where communication happens (inside
backward for DDP, after it for the others) decides how its time is attributed:
- `ddp`: DistributedDataParallel, bucketed all-reduce overlapped with backward. Its exposed
  communication is the time from the last bucket becoming ready (stamped in a communication
  hook, when autograd has produced the last gradients) to the end of backward(), which is
  when DDP has waited for every outstanding all-reduce.
- `allreduce`: one all-reduce of all gradients flattened into one buffer after backward
  (MLBench's CentralizedSGD, by_layer=False); flattening and unflattening count as
  communication.
Collectives go through a `Collectives` object, the network boundary, so a test can inject
delay into communication and check that only the communication phase grows.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.nn.parallel import DistributedDataParallel

from workloads.timing import Clock, StepTimer


class Collectives:
    """Mean all-reduce over the default process group."""

    def all_reduce_mean(self, tensor: torch.Tensor) -> None:
        tensor.div_(dist.get_world_size())
        dist.all_reduce(tensor)

    def all_reduce_mean_async(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        tensor.div_(dist.get_world_size())
        work = dist.all_reduce(tensor, async_op=True)
        assert work is not None
        return work.get_future().then(lambda fut: fut.value()[0])

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        dist.broadcast(tensor, src)


class Strategy(Protocol):
    module: nn.Module  # the model to train (possibly wrapped)
    inner: nn.Module  # the plain model, for evaluation and checkpoints

    def backward(self, loss: torch.Tensor, timer: StepTimer) -> None:
        """Run backward and gradient synchronization, ending laps backward and communication."""
        ...

    def sync_buffers(self) -> None:
        """Make non-parameter state (BatchNorm statistics) identical before evaluation."""
        ...


class DdpStrategy:
    def __init__(self, model: nn.Module, clock: Clock, collectives: Collectives) -> None:
        device_ids = [model_device(model)] if model_device(model).type == "cuda" else None
        self.inner = model
        self.module = DistributedDataParallel(
            model, device_ids=device_ids, gradient_as_bucket_view=True
        )
        self._clock = clock
        self._collectives = collectives
        self._last_ready: Any = None
        self.module.register_comm_hook(state=None, hook=self._hook)

    # No annotations: DDP checks a hook's annotations at runtime and would see strings here.
    def _hook(self, state, bucket):  # type: ignore[no-untyped-def]
        # Called as each bucket's gradients are complete; the last call marks the end of
        # gradient computation (on CUDA the stamp is an event on the compute stream).
        self._last_ready = self._clock.stamp()
        return self._collectives.all_reduce_mean_async(bucket.buffer())

    def backward(self, loss: torch.Tensor, timer: StepTimer) -> None:
        self._last_ready = None
        loss.backward()
        if self._last_ready is None:  # nothing to reduce (no gradients): all of it is compute
            timer.lap("backward")
        else:
            timer.lap_at("backward", self._last_ready)
        timer.lap("communication")

    def sync_buffers(self) -> None:
        # DDP broadcasts rank 0's buffers at every forward (broadcast_buffers=True).
        return None


class FlatAllReduceStrategy:
    def __init__(self, model: nn.Module, collectives: Collectives) -> None:
        self.inner = self.module = model
        self._collectives = collectives
        self._params = [p for p in model.parameters() if p.requires_grad]
        # Same starting point everywhere, as DDP guarantees by broadcasting at construction.
        with torch.no_grad():
            for tensor in [*self._params, *model.buffers()]:
                collectives.broadcast(tensor)

    def backward(self, loss: torch.Tensor, timer: StepTimer) -> None:
        loss.backward()
        timer.lap("backward")
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            flat = _flatten_dense_tensors(grads)
            self._collectives.all_reduce_mean(flat)
            for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
                grad.copy_(synced)
        timer.lap("communication")

    def sync_buffers(self) -> None:
        # Broadcast rank 0's BatchNorm statistics before evaluation: the same statistics DDP
        # would evaluate with (it broadcasts rank 0's buffers at every forward), at a fraction
        # of the cost, since training-mode BatchNorm never reads its running statistics.
        with torch.no_grad():
            for buffer in self.inner.buffers():
                self._collectives.broadcast(buffer)


def build(
    name: str, model: nn.Module, clock: Clock, collectives: Collectives | None = None
) -> Strategy:
    collectives = collectives or Collectives()
    if name == "ddp":
        return DdpStrategy(model, clock, collectives)
    if name == "allreduce":
        return FlatAllReduceStrategy(model, collectives)
    raise ValueError(f"unknown strategy {name!r}")


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
