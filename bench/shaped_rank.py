"""One rank of bench/shaped_network.py: times every strategy's training iterations.

    python bench/shaped_rank.py SETTINGS_JSON OUT_JSON

Run by shaped_network.py with the torchrun variables set (inside a worker's namespaces for a
shaped link), or with WORLD_SIZE=1 for the one-process baseline. Per strategy it builds the
same model from the same seed, trains `iters` iterations on this rank's synthetic CIFAR-shaped
batch (global batch split over the ranks) and records each iteration's step time and its
communication (the exposed part, as workloads.timing measures it). Nothing here asserts.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11(width_divisor: int) -> torch.nn.Module:
    """VGG-11-BN with every layer's channels divided by `width_divisor` (1: the study's)."""
    from workloads.models.vgg import VGG

    layout = tuple(c if c == "M" else c // width_divisor for c in VGG11)  # type: ignore[operator]
    return VGG(layout, num_classes=10)


def iterations(strategy: str, rank: int, world_size: int, settings: dict[str, Any]) -> dict:
    """Per-iteration step and communication seconds of one strategy on this rank."""
    from runner.job.benchmarks import CNN_DIGITS
    from workloads import strategies
    from workloads.timing import CpuClock, StepTimer

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
        config = dataclasses.replace(CNN_DIGITS.config, strategy=strategy)
        strat = strategies.build(config, model, clock)
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
    gc.collect()  # no DDP reducer may outlive the group (workloads/dist.py)
    return {"step_s": steps, "comm_s": comms}


def main() -> None:
    settings, out = json.loads(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)  # one core per worker, as one node each
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        dist.init_process_group("gloo")
    results = {
        name: iterations(name, rank, world_size, settings) for name in settings["strategies"]
    }
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
