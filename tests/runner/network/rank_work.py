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
    """Each strategy's per-step phase times over `num_steps` real training steps of a 0.5 MB
    MLP (workloads' own step function, strategies and StepTimer)."""
    from torch import nn

    from tests.workloads import strategy_harness as harness

    phases = {}
    for name in strategies:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 192), nn.ReLU(),
            nn.Linear(192, 10),
        )  # fmt: skip
        tr = harness.trainer(rank, world_size, harness.config_for(name), model, num_steps)
        phases[name] = [harness.step(tr, i) for i in range(num_steps)]
        del tr  # no DDP reducer may outlive the group (workloads/dist.py)
    return phases
