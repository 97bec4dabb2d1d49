"""What the shaped-network tests run on each gloo rank (module-level: ranks import them)."""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist


def all_reduce_sum(rank: int, world_size: int, numel: int) -> dict[str, object]:
    """A rank-dependent tensor summed over ranks, and where gloo's peers were."""
    tensor = torch.arange(numel, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(tensor)
    return {"sum": tensor, "ifname": os.environ["GLOO_SOCKET_IFNAME"], "host": socket.gethostname()}


def strategy_phases(
    rank: int, world_size: int, strategies: list[str], num_steps: int
) -> dict[str, list[dict[str, float]]]:
    """Each strategy's per-step phase times over `num_steps` training steps of a 0.5 MB MLP,
    with workloads' strategies and StepTimer (imported alone: each rank starts faster)."""
    import torch.nn.functional as F
    from torch import nn

    from workloads.strategies import ddp, gradients
    from workloads.strategies.base import Collectives
    from workloads.telemetry.timing import CpuClock, StepTimer

    builders = {
        "ddp": lambda model, clock: ddp.ddp(model, clock, Collectives()),
        "allreduce": lambda model, clock: gradients.flat_all_reduce(model, Collectives()),
    }
    generator = torch.Generator().manual_seed(100 + rank)  # each rank's own batch
    x, y = (
        torch.randn(16, 64, generator=generator),
        torch.randint(0, 10, (16,), generator=generator),
    )
    phases = {}
    for name in strategies:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 192), nn.ReLU(),
                              nn.Linear(192, 10))  # fmt: skip
        clock = CpuClock()
        timer, strategy = StepTimer(clock), builders[name](model, clock)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        steps = []
        for _ in range(num_steps):
            timer.start()
            timer.lap("data")
            loss = F.cross_entropy(strategy.module(x), y)
            timer.lap("forward")
            strategy.backward(loss, timer)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            timer.lap("optimizer")
            strategy.after_step(timer)
            steps.append(timer.finish())
        phases[name] = steps
        del strategy  # no DDP reducer may outlive the group (workloads/runtime/dist.py)
    return phases


def queued_all_reduces(
    rank: int, world_size: int, count: int, numel: int, watchdog_s: float, stop_s: float
) -> int:
    """`count` all-reduces issued at once through workloads' Collectives, as DDP issues its
    buckets, with the watchdog armed at `watchdog_s`; each waits its turn behind those before
    it on the slow link. Then, when `stop_s` > 0, rank 1 stops answering for `stop_s` seconds
    while rank 0 issues one more (the watchdog must end rank 0 then). Returns how many were
    issued."""
    import time

    from workloads.runtime import watchdog
    from workloads.strategies.base import Collectives

    collectives = Collectives()
    watchdog.arm(rank, watchdog_s)
    watchdog.at("the queued all-reduces")
    futures = [collectives.all_reduce_mean_async(torch.ones(numel)) for _ in range(count)]
    torch.futures.wait_all(futures)
    if stop_s > 0:
        watchdog.at("the all-reduce after a peer stopped")
        if rank == 1:
            watchdog.disarm()
            time.sleep(stop_s)
            os._exit(0)  # its peer is gone (ended by its watchdog), and the group with it
        collectives.all_reduce_mean(torch.ones(1))
    watchdog.disarm()
    return count
