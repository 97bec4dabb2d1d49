"""What the strategy and timing tests run on every rank: a tiny model, real training steps.

Steps go through workloads.training.loop's own step function with a Trainer over random CIFAR-like
8x8 data, so the tests exercise the loop's strategy seams (backward, after_step) as a run does.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from runner.job.benchmarks import CNN_DIGITS
from workloads import strategies
from workloads.configuration.train_config import TrainConfig
from workloads.data import Splits
from workloads.strategies.base import Collectives
from workloads.telemetry.timing import CpuClock, StepTimer
from workloads.training.loop import Trainer, train_step

BATCH = 16


def config_for(strategy: str, **changes: Any) -> TrainConfig:
    base = CNN_DIGITS.config.replace(lr_scaling="none", warmup_epochs=0.0)
    return base.replace(strategy=strategy, **changes)


def small_bn_net(seed: int = 0) -> nn.Module:
    """Conv + BatchNorm + Linear: matrices PowerSGD compresses, vectors it does not, buffers."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 10),
    )


def one_matrix_net(seed: int = 0) -> nn.Module:
    """One parameter tensor (one call per collective per step) and BatchNorm buffers."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 16, bias=False), nn.BatchNorm1d(16, affine=False)
    )


def random_splits(rank: int, num_steps: int) -> Splits:
    """Each rank's own random data (as disjoint shards would be)."""
    generator = torch.Generator().manual_seed(100 + rank)
    n = BATCH * num_steps
    x = torch.randn(n, 1, 8, 8, generator=generator)
    y = torch.randint(0, 10, (n,), generator=generator)
    return Splits(x, y, x[:BATCH], y[:BATCH], num_classes=10)


def trainer(
    rank: int,
    world_size: int,
    config: TrainConfig,
    model: nn.Module,
    num_steps: int,
    collectives: Collectives | None = None,
) -> Trainer:
    clock = CpuClock()
    strategy = strategies.build(config.strategy, config.run.seed, model, clock, collectives)
    return Trainer(
        config, rank, world_size, torch.device("cpu"), random_splits(rank, num_steps), strategy,
        config.build_optimizer(model.parameters()), StepTimer(clock), torch.Generator(),
    )  # fmt: skip


def step(tr: Trainer, i: int) -> dict[str, float]:
    """Train on batch i; returns the step's phase times."""
    train_step(tr, torch.arange(i * BATCH, (i + 1) * BATCH), 0.0, i)
    return tr.timer.finish()


def backward_gradients(tr: Trainer, i: int = 0) -> list[torch.Tensor | None]:
    """The gradients a strategy leaves after backward + communication of batch i (no step);
    None for a parameter left without one."""
    tr.strategy.module.train()
    x, y = (
        tr.splits.train_x[i * BATCH : (i + 1) * BATCH],
        tr.splits.train_y[i * BATCH : (i + 1) * BATCH],
    )
    tr.timer.start()
    tr.strategy.backward(nn.functional.cross_entropy(tr.strategy.module(x), y), tr.timer)
    grads = [None if p.grad is None else p.grad.clone() for p in tr.strategy.inner.parameters()]
    tr.optimizer.zero_grad(set_to_none=True)
    return grads


def local_gradients(rank: int, model: nn.Module) -> list[torch.Tensor]:
    """This rank's gradients of batch 0 without any communication."""
    local = copy.deepcopy(model)
    splits = random_splits(rank, 1)
    nn.functional.cross_entropy(local(splits.train_x), splits.train_y).backward()
    return [p.grad.clone() for p in local.parameters()]


def mean_over_ranks(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    out = [t.clone() for t in tensors]
    for t in out:
        dist.all_reduce(t)
        t.div_(dist.get_world_size())
    return out


def two_bucket_net(seed: int = 0) -> nn.Module:
    """Gradients arrive last layer first; the last layer's 1 MiB weight fills DDP's first
    bucket (1 MiB), and the first layer's go in a second one: two hook calls a step."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 16384))


class HostWorkCollectives(Collectives):
    """Work of `work_s` on the calling thread before each asynchronous collective, as a
    compressing hook does: inside a DDP hook, that is the thread running backward."""

    def __init__(self, work_s: float) -> None:
        self.work_s = work_s
        self.calls = 0

    def all_reduce_mean_async(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        self.calls += 1
        time.sleep(self.work_s)
        return super().all_reduce_mean_async(tensor)


class DelayedCollectives(Collectives):
    """A network `delay_s` slower per collective: synchronous calls return later, futures
    complete later (the sleep runs on the thread completing the future, not the caller's)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls = 0

    def _wait(self) -> None:
        self.calls += 1
        time.sleep(self.delay_s)

    def all_reduce_mean(self, tensor: torch.Tensor) -> None:
        self._wait()
        super().all_reduce_mean(tensor)

    def gather(self, tensor: torch.Tensor, dst: int = 0) -> list[torch.Tensor] | None:
        self._wait()
        return super().gather(tensor, dst)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self._wait()
        return super().all_gather(tensor)

    def scatter(self, tensor: torch.Tensor, parts: list[torch.Tensor] | None, src: int = 0) -> None:
        self._wait()
        super().scatter(tensor, parts, src)

    def all_reduce_mean_async(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        return self.delivered(super().all_reduce_mean_async(tensor))

    def delivered(
        self, future: torch.futures.Future[torch.Tensor]
    ) -> torch.futures.Future[torch.Tensor]:
        def late(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            self._wait()
            return fut.value()

        return future.then(late)


class BranchNet(nn.Module):
    """A user's model whose parameters do not all get gradients: `branch` is in the forward
    on rank `branch_rank` only (every rank's when None), `unused` in no forward at all."""

    def __init__(self, branch_rank: int | None, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        self.branch = nn.Linear(10, 10)
        self.unused = nn.Linear(3, 3)
        self.branch_rank = branch_rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        if self.branch_rank is None or dist.get_rank() == self.branch_rank:
            y = self.branch(y)
        return y


def local_gradients_or_zeros(rank: int, model: nn.Module, num_steps: int) -> list[torch.Tensor]:
    """local_gradients of batch 0 of a trainer's `num_steps`, a parameter this rank's forward
    did not use at zero."""
    local = copy.deepcopy(model)
    splits = random_splits(rank, num_steps)
    x, y = splits.train_x[:BATCH], splits.train_y[:BATCH]
    nn.functional.cross_entropy(local(x), y).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in local.parameters()]


class EmptyParamNet(nn.Module):
    """A parameter of no elements (a layer of zero width) beside an ordinary one."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        self.empty = nn.Parameter(torch.zeros(0, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + self.empty.sum()
