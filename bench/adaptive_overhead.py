"""What monitoring the gradient noise scale costs, against the monitoring interval.

Two gloo processes train cnn-digits (the quickstart's CNN and data, SGD, per-worker batch 32)
or ResNet-20 (CIFAR-shaped noise: speed only) with a communication strategy (DDP by default),
its gradient exchange probed (probes.py). A monitoring step's cost grows far more slowly than
the step, so its share falls as steps grow: KungFu measured ResNet-class steps.
Two measurements, both ratios from this one invocation:
- paired (the figure): monitoring every other step, each monitoring step's time minus the
  mean of its two neighbours' is what monitoring one step costs (probe armed, norms read,
  the one all-gather, the snapshot); neighbours share whatever else the machine is doing,
  so other people's work cancels out. The overhead at interval k is the median extra cost
  divided by k, over the median unmonitored step;
- direct (a cross-check): rounds of runs without monitors and with them at each interval,
  in an order that rotates from round to round; a run's wall time over the unmonitored run's
  in the same round, minus one, median over rounds. On a shared machine a burst of someone
  else's work within one run moves it by tens of percent.
Unmonitored steps still pass the unarmed probe (one attribute test per bucket), in both.
KungFu (OSDI 2020) reports 6.3 % at its shortest interval and 1.0 % at a longer one for
its noise-scale monitor; the README puts both side by side. A speed figure, not a test.

Usage: python bench/adaptive_overhead.py [--paired-steps 2000] [--rounds 5] [--steps 200]
       [--intervals 1 10 100] [--strategy ddp|allreduce] [--model cnn-digits|resnet20]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.spawned import run_ranks

KUNGFU_OVERHEAD = {"shortest interval": 0.063, "longer interval": 0.010}
OFF = "off"


def _strategy(name: str, model: torch.nn.Module, probe: Any) -> Any:
    """The strategy around `model`, its gradient exchange probed."""
    from workloads.strategies import ddp, gradients
    from workloads.strategies.base import Collectives, flat_all_reduce_mean
    from workloads.telemetry.timing import CpuClock

    comm = Collectives()
    if name == "ddp":
        hook = ddp.all_reduce_hook(comm)
        return ddp.DdpStrategy(
            model, CpuClock(), comm, probe.wrap_comm_hook(hook) if probe else hook
        )
    exchange = probe.wrap_exchange(flat_all_reduce_mean) if probe else flat_all_reduce_mean
    return gradients.GradientSyncStrategy(model, comm, exchange)


def _run(config: Any, steps: int, data: Any, setup: dict[str, Any]) -> dict[str, Any]:
    """Wall seconds of `steps` training steps of one configuration (after a common start),
    and each step's seconds."""
    import torch.distributed as dist

    from workloads.adaptive.monitors import Monitor, MonitorConfig
    from workloads.telemetry.timing import CpuClock, StepTimer

    strategy, optimizer = setup["strategy"], setup["optimizer"]
    monitor = None
    if config != OFF:
        monitor = Monitor(MonitorConfig(interval_steps=config), torch.device("cpu"), setup["probe"])
    batches, timer, step_s = data["batches"], StepTimer(CpuClock()), []
    dist.barrier()
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        index = batches[step % len(batches)]
        if monitor is not None:
            monitor.begin_step(step)
        timer.start()
        loss = F.cross_entropy(strategy.module(data["x"][index]), data["y"][index])
        timer.lap("forward")
        strategy.backward(loss, timer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        timer.lap("optimizer")
        if monitor is not None:
            monitor.exchange(step, index.numel())
        phases = timer.finish()
        if monitor is not None:
            monitor.record_time(phases)
        step_s.append(time.perf_counter() - t0)
    dist.barrier()
    return {"wall_s": time.perf_counter() - start, "step_s": step_s}


def _model_and_data(name: str, rank: int, world_size: int) -> tuple[Any, dict[str, Any]]:
    """cnn-digits on its real data, or ResNet-20 on CIFAR-shaped noise (speed only)."""
    from runner.job.benchmarks import CNN_DIGITS
    from workloads.data.sampling import batches, epoch_shard

    batch = CNN_DIGITS.config.data.batch_size
    torch.manual_seed(0)
    if name == "resnet20":
        from workloads.models.resnet.model import CifarResNet

        model = CifarResNet(20, "m1", 10)
        gen = torch.Generator().manual_seed(rank)
        x, y = (
            torch.randn(16 * batch, 3, 32, 32, generator=gen),
            torch.randint(0, 10, (16 * batch,)),
        )
        return model, {"x": x, "y": y, "batches": batches(torch.arange(len(x)), batch)}
    from workloads.data.digits import load_digits
    from workloads.models.cnn.model import DigitsCNN

    splits = load_digits(torch.device("cpu"))
    shard = epoch_shard(splits.num_train, world_size, rank, 0, CNN_DIGITS.config.run.seed)
    usable = [b for b in batches(shard, batch) if b.numel() > 1]
    return DigitsCNN(10), {"x": splits.train_x, "y": splits.train_y, "batches": usable}


def rank_rounds(rank: int, world_size: int, args: dict[str, Any]) -> dict[str, Any]:
    from workloads.adaptive.probes import GradientProbe

    model, data = _model_and_data(args["model"], rank, world_size)
    probe = GradientProbe()
    strategy = _strategy(args["strategy"], model, probe)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    setup = {"probe": probe, "strategy": strategy, "optimizer": optimizer}
    _run(OFF, 20, data, setup)  # warm-up, not counted
    paired = _run(2, args["paired_steps"], data, setup)["step_s"]
    configs: list[Any] = [OFF, *args["intervals"]]
    runs: dict[str, Any] = {str(c): [] for c in configs}
    for r in range(args["rounds"]):
        for config in configs[r % len(configs) :] + configs[: r % len(configs)]:
            runs[str(config)].append(_run(config, args["steps"], data, setup)["wall_s"])
    runs["paired"] = paired
    return runs


def _rank(rank: int, world_size: int, args: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    import gc

    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    result = rank_rounds(rank, world_size, args)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return result


def measure(args: dict[str, Any], world_size: int = 2) -> dict[str, Any]:
    """Rank 0's runs per configuration and round (the ranks run in lockstep)."""
    rank0: dict[str, Any] = run_ranks(_rank, world_size, args, args["timeout_s"], args["model"])[0]
    return rank0


def summarize(runs: dict[str, Any], intervals: list[int]) -> dict[str, Any]:
    paired = runs["paired"]  # even steps monitored, odd ones not
    unmonitored = statistics.median(paired[1::2])
    extra = statistics.median(
        paired[i] - (paired[i - 1] + paired[i + 1]) / 2 for i in range(2, len(paired) - 1, 2)
    )
    direct = {}
    for k in intervals if runs[OFF] else ():  # no rounds: no direct check
        ratios = [t / base for t, base in zip(runs[str(k)], runs[OFF], strict=True)]
        direct[str(k)] = {
            "median_pct": round(100 * (statistics.median(ratios) - 1), 2),
            "per_round_pct": [round(100 * (r - 1), 1) for r in ratios],
        }
    return {
        "unmonitored_step_ms": round(1000 * unmonitored, 3),
        "monitoring_step_extra_ms": round(1000 * extra, 3),
        "overhead_pct_by_interval_steps": {
            str(k): round(100 * extra / k / unmonitored, 2) for k in intervals
        },
        "direct_wall_pct_by_interval_steps": direct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paired-steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5, help="of the direct check (0: none)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--strategy", choices=("ddp", "allreduce"), default="ddp")
    parser.add_argument("--model", choices=("cnn-digits", "resnet20"), default="cnn-digits")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ns = parser.parse_args()
    if min(ns.intervals) < 1 or ns.rounds < 0 or ns.paired_steps < 4:
        parser.error("every interval must be at least 1, --paired-steps 4, --rounds 0")
    if ns.steps < 2 * max(ns.intervals):
        parser.error("--steps must be at least twice the longest interval")
    args = {
        "paired_steps": ns.paired_steps, "rounds": ns.rounds, "steps": ns.steps,
        "intervals": ns.intervals, "model": ns.model,
        "strategy": ns.strategy, "timeout_s": ns.timeout_s,
    }  # fmt: skip
    figures = {
        "overhead": summarize(measure(args), ns.intervals),
        "kungfu_reported": KUNGFU_OVERHEAD,
        "model": ns.model,
        "strategy": ns.strategy,
        "workers": 2,
        "paired_steps": ns.paired_steps,
        "rounds": ns.rounds,
        "steps_per_run": ns.steps,
        "cpu_cores": os.cpu_count(),
    }
    print(json.dumps(figures, indent=2))
    if ns.json is not None:
        ns.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
