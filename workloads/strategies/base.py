"""The pieces every communication strategy shares: the Strategy protocol and Collectives.

`Collectives` is the network boundary: every collective a strategy issues goes through it
(or, for collectives a torch library issues itself, its completion does: `delivered`), so a
test can pass one that delays communication and check that only the communication phase grows.
Not here: the strategies themselves (ddp.py, gradients.py, averaging.py in this package).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from workloads.runtime import watchdog
from workloads.telemetry.timing import StepTimer


class Collectives:
    """Collectives over the default process group; means divide before summing (as DDP does,
    so that fp16 buffers do not overflow). Each is timed by the watchdog (workloads/runtime/
    watchdog.py): one that never completes ends the run in one line, gloo's timeout or not.

    `carried`: set by a strategy for one gradient exchange (UsageCarrier), a small tensor that
    the exchange averages along with the gradients, in their collectives (carry_on)."""

    carried: torch.Tensor | None = None

    def all_reduce_mean(self, tensor: torch.Tensor) -> None:
        tensor.div_(dist.get_world_size())
        with watchdog.collective("an all-reduce"):
            dist.all_reduce(tensor)

    def all_reduce_mean_async(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        tensor.div_(dist.get_world_size())
        work = dist.all_reduce(tensor, async_op=True)
        assert work is not None
        future = work.get_future().then(lambda fut: fut.value()[0])
        watchdog.track(future, "an all-reduce")
        return future

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor`, stacked in rank order: [world size, *tensor.shape]."""
        out = tensor.new_empty((dist.get_world_size(), *tensor.shape))
        with watchdog.collective("an all-gather"):
            dist.all_gather_single(out.view(-1), tensor.contiguous().view(-1))
        return out

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        with watchdog.collective("a broadcast"):
            dist.broadcast(tensor, src)

    def gather(self, tensor: torch.Tensor, dst: int = 0) -> list[torch.Tensor] | None:
        """Every rank's `tensor`, in rank order, on `dst`; None on the other ranks."""
        is_dst = dist.get_rank() == dst
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())] if is_dst else None
        with watchdog.collective("a gather"):
            dist.gather(tensor, parts, dst=dst)
        return parts

    def scatter(self, tensor: torch.Tensor, parts: list[torch.Tensor] | None, src: int = 0) -> None:
        """Rank r receives parts[r] (given on `src` only) into `tensor`."""
        with watchdog.collective("a scatter"):
            dist.scatter(tensor, parts, src=src)

    def delivered(
        self, future: torch.futures.Future[torch.Tensor]
    ) -> torch.futures.Future[torch.Tensor]:
        """A future of collectives that a torch library issued itself (PowerSGD's hook calls
        dist.all_reduce directly): passed through here so that a slower network, as a test
        simulates it, can delay its completion."""
        return future


GradientExchange = Callable[[list[torch.Tensor], Collectives], None]


class Strategy(Protocol):
    # Read-only members, so that a strategy may hold a subclass (DDP's DistributedDataParallel).
    @property
    def module(self) -> nn.Module:
        """The model to train (possibly wrapped)."""
        ...

    @property
    def inner(self) -> nn.Module:
        """The plain model, for evaluation and checkpoints."""
        ...

    def backward(self, loss: torch.Tensor, timer: StepTimer) -> None:
        """Run backward and gradient synchronization, ending laps backward and communication."""
        ...

    def no_sync(self) -> AbstractContextManager[None]:
        """Within it, forward and backward() only accumulate local gradients: no communication
        (the micro-batches of gradient accumulation before an update's last one). Forward is
        inside too because DDP prepares its reducer there."""
        ...

    def after_step(self, timer: StepTimer) -> None:
        """Communicate after optimizer.step (model averaging), ending a communication lap if it
        did; a no-op for strategies that synchronize gradients."""
        ...

    def sync_buffers(self) -> None:
        """Make the model state that evaluation reads (BatchNorm statistics) identical."""
        ...


def trainable(model: nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


def gradients(params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The gradient of every parameter in `params`, a missing one (a parameter this rank's
    forward did not use: a branch taken on some ranks only, a layer in no forward) filled
    with zeros. Every rank then exchanges the same tensors in the same order, whatever its
    own forward used (skipping them would mismatch the collectives, or silently average one
    rank's layer with another's), and the mean is the global batch's gradient, to which a
    rank that did not use a parameter contributes zero. A parameter that no rank used gets
    its gradient taken away again after the exchange (UsageCarrier)."""
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    return grads


class UsageCarrier:
    """Which parameters any rank's forward used, agreed within the gradient exchange itself.

    A parameter that no rank used has no gradient in one process training on the global
    batch, and the optimizer skips it: no weight decay, no momentum step (torch's SGD and
    Adam, and DDP's find_unused_parameters, leave such a gradient None). Exchanged as zeros
    it would decay and drift, so an exact strategy on N workers would train another model
    than one process does. Each rank's used flags ride on the exchange (Collectives.carried:
    in the flat buffer, or on the last tensor's collective; a collective of their own would
    cost every step a round trip), past any probe that reads the gradients, and where every
    rank's flag is 0 the gradient is set back to None."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self._params = params
        self._used: list[bool] = []

    def exchange(self, exchange: GradientExchange, collectives: Collectives) -> None:
        """`exchange` of gradients(params), then the gradients no rank produced dropped."""
        self._used = [p.grad is not None for p in self._params]
        grads = gradients(self._params)
        if not grads:
            return
        flags = torch.tensor(self._used, dtype=grads[-1].dtype, device=grads[-1].device)
        collectives.carried = flags
        try:
            exchange(grads, collectives)
        finally:
            collectives.carried = None
        # A rank that used every parameter knows that every share is at least 1/N: nothing to
        # read (reading the flags waits for the exchange on CUDA).
        if all(self._used):
            return
        for p, share in zip(self._params, flags.tolist(), strict=True):
            if share == 0:
                p.grad = None


# Below this size an exchange costs its round trips, not its bytes (a logistic regression's
# 8 kB gradient: 0.7 ms for gloo's all-reduce on loopback, 0.45 ms gathered; bench/
# mlbench_compare.py): gathering every rank's copy takes N-1 steps where a ring all-reduce
# takes 2(N-1), and the mean is then taken locally.
SMALL_EXCHANGE_BYTES = 64 * 1024


def flat_all_reduce_mean(tensors: list[torch.Tensor], collectives: Collectives) -> None:
    """Average `tensors` in place across ranks with one collective on a flattened copy: an
    all-reduce, or for a small copy an all-gather and a local mean, which every rank takes
    over the same rows in the same order, so all of them hold the same result."""
    if not tensors:
        return
    carried = taken_carried(collectives)
    if carried is not None:
        tensors = [*tensors, carried]
    flat = _flatten_dense_tensors(tensors)
    if flat.numel() * flat.element_size() <= SMALL_EXCHANGE_BYTES:
        flat = collectives.all_gather(flat).mean(dim=0)
    else:
        collectives.all_reduce_mean(flat)
    for tensor, synced in zip(tensors, _unflatten_dense_tensors(flat, tensors), strict=True):
        tensor.copy_(synced)


def taken_carried(collectives: Collectives) -> torch.Tensor | None:
    """The tensor `collectives` carries for this exchange, which takes it (None: nothing);
    read with getattr, as a stand-in for Collectives in a test need not have the field."""
    carried = getattr(collectives, "carried", None)
    if carried is not None:
        collectives.carried = None
    return carried


def carry_on(tensor: torch.Tensor, collectives: Collectives) -> torch.Tensor:
    """What an exchange of one tensor at a time sends for `tensor`: `tensor` itself, or, for
    the tensor that takes the exchange's carried one along, a copy with it appended (written
    back by carried_back)."""
    carried = getattr(collectives, "carried", None)  # a stand-in's may have none
    if carried is None:
        return tensor
    return torch.cat([tensor.detach().reshape(-1), carried])


def carried_back(tensor: torch.Tensor, sent: torch.Tensor, collectives: Collectives) -> None:
    """After `sent` (from carry_on) was exchanged: its parts back into `tensor` and the
    carried tensor, which is then done with."""
    carried = taken_carried(collectives)
    if carried is None:
        return
    tensor.copy_(sent[: tensor.numel()].view_as(tensor))
    carried.copy_(sent[tensor.numel() :])


@torch.no_grad()
def broadcast_state(model: nn.Module, collectives: Collectives) -> None:
    """Rank 0's parameters and buffers everywhere: the same start DDP guarantees."""
    for tensor in [*model.parameters(), *model.buffers()]:
        collectives.broadcast(tensor)


@torch.no_grad()
def broadcast_coalesced(tensors: Iterable[torch.Tensor], collectives: Collectives) -> None:
    """Rank 0's `tensors` everywhere, one broadcast per dtype (as DDP coalesces them)."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        by_dtype.setdefault(tensor.dtype, []).append(tensor)
    for group in by_dtype.values():
        flat = _flatten_dense_tensors(group)
        collectives.broadcast(flat)
        for tensor, synced in zip(group, _unflatten_dense_tensors(flat, group), strict=True):
            tensor.copy_(synced)


@torch.no_grad()
def broadcast_buffers(model: nn.Module, collectives: Collectives) -> None:
    """Rank 0's BatchNorm statistics everywhere, the ones DDP broadcasts at each forward."""
    for buffer in model.buffers():
        collectives.broadcast(buffer)


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class LocalGradients(ABC):
    """Strategies that exchange gradients themselves after backward, rather than in autograd's
    hooks as DDP does: backward() is autograd's, then `synchronize`. Gradients computed
    without autograd (a closed form, workloads/optimization/objectives.py) are synchronized the same
    way. Their no_sync(): while `syncing` is false, synchronize() skips the exchange."""

    syncing: bool = True

    def backward(self, loss: torch.Tensor, timer: StepTimer) -> None:
        loss.backward()
        timer.lap("backward")
        self.synchronize(timer)

    @abstractmethod
    def synchronize(self, timer: StepTimer) -> None:
        """Exchange the gradients in the parameters' .grad (unless within no_sync), ending
        the communication lap."""

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True
