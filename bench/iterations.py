"""The timed training iteration of the data-parallel benches (data_parallel.py, shaped_rank.py).

One model (VGG-11-BN, channels optionally divided), one synthetic CIFAR-shaped batch per rank,
SGD lr 0.1, momentum 0.9, weight decay 1e-4, fixed seeds; each iteration's step time and its
exposed communication, as workloads.telemetry.timing measures them. Nothing here asserts.
"""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11(width_divisor: int = 1) -> torch.nn.Module:
    """VGG-11-BN with every layer's channels divided by `width_divisor` (1: the study's)."""
    from workloads.models.vgg.model import VGG

    layout = tuple(c if c == "M" else c // width_divisor for c in VGG11)  # type: ignore[operator]
    return VGG(layout, num_classes=10)


def iterations(strategy: str, rank: int, world_size: int, settings: dict[str, Any]) -> dict:
    """Per-iteration step and communication seconds of one strategy on this rank.

    settings: iters, global_batch, width_divisor, and optionally options (each strategy's
    own settings by name: a key of one strategy is refused with another)."""
    from runner.job.benchmarks import CNN_DIGITS
    from workloads import strategies
    from workloads.telemetry.timing import CpuClock, StepTimer

    torch.manual_seed(0)  # the same initial model on every rank
    model = vgg11(settings["width_divisor"])
    batch = settings["global_batch"] // world_size
    generator = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(batch, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    clock = CpuClock()
    timer = StepTimer(clock)
    strat = None
    if world_size > 1:
        options = settings.get("options", {}).get(strategy, {})
        config = CNN_DIGITS.config.replace(strategy=strategy, **options)
        strat = strategies.build(config.strategy, config.run.seed, model, clock)
    module = model if strat is None else strat.module
    steps, comms = [], []
    for _ in range(settings["iters"]):
        timer.start()
        loss = F.cross_entropy(module(x), y)
        timer.lap("forward")
        if strat is None:
            loss.backward()
            timer.lap("backward")
        else:
            strat.backward(loss, timer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        timer.lap("optimizer")
        if strat is not None:
            strat.after_step(timer)
        phases = timer.finish()
        steps.append(sum(phases.values()))
        comms.append(phases["communication"])
    del strat, module
    gc.collect()  # no DDP reducer may outlive the group (workloads/runtime/dist.py)
    if dist.is_initialized():
        dist.barrier()
    return {"step_s": steps, "comm_s": comms}
