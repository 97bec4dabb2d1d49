"""Strategies built on DistributedDataParallel and its communication hooks.

All of them overlap communication with backward: DDP hands each bucket of gradients to a
communication hook as soon as autograd has produced it. `DdpStrategy` wraps the hook so that
every call first stamps the clock; the last stamp of a step marks the end of gradient
computation, and the rest of loss.backward() (DDP waits there for every bucket's future) is the
exposed communication. So the backward lap ends at the last bucket's stamp and the
communication lap at the end of backward(). What a hook does on the thread running backward
(casting a bucket to fp16, PowerSGD's matrix products before its first all-reduce, issuing the
collective) is stamped on entry and exit and booked as communication for every bucket: for the
last one it already falls after the backward lap, for earlier ones it is moved out of the
backward lap (StepTimer.move), where it delayed the gradients still to come. Work a hook
chains on its collective's future (PowerSGD's second half) runs when that completes, off the
backward thread; what of it is not hidden by backward is exposed communication at the end.

- `ddp`: mean all-reduce of each bucket (the behaviour of DDP without a hook).
- `fp16-compress` / `bf16-compress`: torch's compression wrappers around that all-reduce.
- `powersgd`: torch's PowerSGD hook (Vogels et al. 2019) with error feedback and warm start,
  plain all-reduce for the first `powersgd_start_iter` steps.
BatchNorm: DDP broadcasts rank 0's buffers before every forward (broadcast_buffers=True), and
`sync_buffers` broadcasts them once more before evaluation, because each rank's last forward
updated its own copy. That broadcast is communication too: it waits for the slowest rank to
reach its forward and pays the network's latency, so it is issued here (DDP's buffer hook,
when DDP would broadcast), stamped, and moved out of the forward lap like a hook's work.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel
from torch.nn.parallel.distributed import _BufferCommHookLocation

from workloads.runtime import watchdog
from workloads.strategies.base import (
    Collectives,
    broadcast_buffers,
    broadcast_coalesced,
    model_device,
)
from workloads.telemetry.timing import Clock, StepTimer

if TYPE_CHECKING:
    from workloads.adaptive.probes import GradientProbe

CommHook = Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]
_GRADIENT_EXCHANGE = "the gradient exchange of DDP's communication hook"


class DdpStrategy:
    def __init__(
        self,
        model: nn.Module,
        clock: Clock,
        collectives: Collectives,
        comm_hook: CommHook,
        hook_state: Any = None,
    ) -> None:
        device_ids = [model_device(model)] if model_device(model).type == "cuda" else None
        self.inner = model
        # A zero-size parameter has no values to exchange, and torch's PowerSGD hook fails on
        # one (it views each matrix as [rows, -1]): DDP leaves them out, and so does the check
        # that every other parameter got a gradient.
        empty = [n for n, p in model.named_parameters() if p.numel() == 0]
        if empty:
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                model, _ddp_spellings(model, empty)
            )
        self.module = DistributedDataParallel(
            model, device_ids=device_ids, gradient_as_bucket_view=True
        )
        self._clock = clock
        self._collectives = collectives
        self._named_trainable = [
            (n, p) for n, p in model.named_parameters() if p.requires_grad and n not in empty
        ]
        self._comm_hook = comm_hook
        self._hook_spans: list[tuple[Any, Any]] = []  # (entry, exit) stamps, this step's
        self._buffer_spans: list[tuple[Any, Any]] = []  # the buffer broadcasts' since backward
        self.module.register_comm_hook(state=hook_state, hook=self._hook)
        # DDP still decides when buffers are broadcast (before a forward that follows a
        # synchronized one); this hook only does it where it can be timed.
        self.module._register_buffer_comm_hook(
            None, self._broadcast_buffers, _BufferCommHookLocation.PRE_FORWARD
        )

    # No annotations: DDP checks a hook's annotations at runtime and would see strings here.
    def _hook(self, state, bucket):
        # Called as each bucket's gradients are complete; the last entry marks the end of
        # gradient computation (on CUDA the stamps are events on the compute stream).
        entry = self._clock.stamp()
        future = self._comm_hook(state, bucket)
        self._hook_spans.append((entry, self._clock.stamp()))
        # DDP's reducer waits for it with no timeout: the watchdog bounds that wait.
        watchdog.track(future, _GRADIENT_EXCHANGE)
        return future

    def _broadcast_buffers(self, state: object, named_buffers: dict[str, torch.Tensor]) -> None:
        # DDP's broadcast of rank 0's buffers (its default one, coalesced per dtype).
        entry = self._clock.stamp()
        broadcast_coalesced(named_buffers.values(), self._collectives)
        self._buffer_spans.append((entry, self._clock.stamp()))

    def backward(self, loss: torch.Tensor, timer: StepTimer) -> None:
        # This step's forward broadcast the buffers (a stale span from a forward without
        # backward starts before this step and is ignored by the timer).
        for entry, exit_ in self._buffer_spans:
            timer.move("communication", entry, exit_)
        self._buffer_spans = []
        self._hook_spans = []
        with watchdog.naming(_GRADIENT_EXCHANGE):  # DDP's reducer waits on the hooks in it
            loss.backward()
        if self.module.require_backward_grad_sync:  # not within no_sync: a reducing step
            self._refuse_unused()
        if not self._hook_spans:  # nothing to reduce (no gradients): all of it is compute
            timer.lap("backward")
        else:
            timer.lap_at("backward", self._hook_spans[-1][0])
            for entry, exit_ in self._hook_spans[:-1]:  # the last one is past the lap already
                timer.move("communication", entry, exit_)
        timer.lap("communication")

    def _refuse_unused(self) -> None:
        # DDP without find_unused_parameters (a graph walk every forward, for every run)
        # waits for every parameter's gradient: a parameter this rank's forward did not use
        # leaves its bucket unreduced here while the other ranks wait on it, and DDP says so
        # only at the next forward, in a page of text. One line now, with the way out.
        for name, p in self._named_trainable:
            if p.grad is None:
                raise RuntimeError(
                    f"parameter {name} got no gradient on this rank (not in its forward): "
                    "DDP-based strategies need every trainable parameter in every forward; "
                    "use --set strategy=allreduce, or freeze it (requires_grad=False)"
                )

    def no_sync(self) -> AbstractContextManager[None]:
        # DDP's own: the hooks do not run, so backward() above laps zero communication.
        return self.module.no_sync()

    def after_step(self, timer: StepTimer) -> None:
        return None

    def sync_buffers(self) -> None:
        broadcast_buffers(self.inner, self._collectives)


def _ddp_spellings(model: nn.Module, names: list[str]) -> list[str]:
    """`names` (of parameters, as named_parameters gives them) as DDP's ignore list must
    hold them: its reducer looks up f"{module}.{param}", which for a parameter of the
    top-level module is ".name" (torch 2.x), while its other lookups use "name"."""
    own = {n for n, _ in model.named_parameters(recurse=False)}
    return [*names, *(f".{n}" for n in names if n in own)]


def all_reduce_hook(collectives: Collectives) -> CommHook:
    """torch's allreduce_hook, with the collective issued through `collectives`."""

    def hook(state, bucket):
        return collectives.all_reduce_mean_async(bucket.buffer())

    return hook


def probed(hook: CommHook, probe: GradientProbe | None) -> CommHook:
    """`hook`, its buckets read by the noise-scale probe on monitoring steps
    (workloads/adaptive/probes.py): the local bucket before the hook, what it returns after.
    The reads run inside DdpStrategy's stamps, so they are booked as communication."""
    return hook if probe is None else probe.wrap_comm_hook(hook)


def ddp(
    model: nn.Module, clock: Clock, collectives: Collectives, probe: GradientProbe | None = None
) -> DdpStrategy:
    return DdpStrategy(model, clock, collectives, probed(all_reduce_hook(collectives), probe))


def fp16_compress(
    model: nn.Module, clock: Clock, collectives: Collectives, probe: GradientProbe | None = None
) -> DdpStrategy:
    # fp16_compress_wrapper(allreduce_hook) is torch's fp16_compress_hook (its docs say so);
    # wrapping our hook keeps the collective on the Collectives boundary.
    hook = default_hooks.fp16_compress_wrapper(all_reduce_hook(collectives))
    return DdpStrategy(model, clock, collectives, probed(hook, probe))


def bf16_compress(
    model: nn.Module, clock: Clock, collectives: Collectives, probe: GradientProbe | None = None
) -> DdpStrategy:
    hook = default_hooks.bf16_compress_wrapper(all_reduce_hook(collectives))
    return DdpStrategy(model, clock, collectives, probed(hook, probe))


def powersgd(
    model: nn.Module,
    clock: Clock,
    collectives: Collectives,
    *,
    rank: int,
    start_iter: int,
    seed: int,
    probe: GradientProbe | None = None,
) -> DdpStrategy:
    """torch's PowerSGD hook and state; its state carries the error-feedback memory and the
    warm-started Q matrices across steps. The seed makes the initial Q the same on every rank."""
    state = powerSGD_hook.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=rank,
        start_powerSGD_iter=start_iter,
        use_error_feedback=True,
        warm_start=True,
        random_seed=seed,
    )

    def hook(hook_state, bucket):
        return collectives.delivered(powerSGD_hook.powerSGD_hook(hook_state, bucket))

    if dist.get_backend() != "nccl":
        hook = one_bucket_at_a_time(hook)
    return DdpStrategy(model, clock, collectives, probed(hook, probe), hook_state=state)


def one_bucket_at_a_time(hook: CommHook) -> CommHook:
    """`hook`, each bucket's call waiting for the previous bucket's future first. PowerSGD
    issues its second all-reduce from the first one's completion callback; on gloo that runs
    whenever the first completes, so with two buckets or more the ranks issue their
    collectives in different orders and wait on each other for ever (torch's DDP and
    powerSGD_hook alone hang so on gloo; ResNet-20's 1.1 MB of gradients make two buckets).
    NCCL issues the callback's collective as the hook returns, in the same order on every
    rank. The wait is inside the hook's stamps, so it is booked as the communication it is."""
    previous: list[torch.futures.Future[torch.Tensor]] = []  # the last bucket's (done by a
    # new step: DDP waited for every bucket at the end of the last backward)

    def ordered(hook_state, bucket):
        if previous:
            previous[0].wait()
        future = hook(hook_state, bucket)
        previous[:] = [future]
        return future

    return ordered
