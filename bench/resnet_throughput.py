"""ResNet-20 training throughput in one process on this machine's CPU (or, --device cuda, one
GPU), and what each step optimization buys, measured side by side in one run. Prints one
JSON object.

Each variant trains ResNet-20 (CIFAR, m1) on CIFAR-shaped uint8 data with the workload's own
data path (index + workloads.data.cifar10.CifarAugment on the device) and reports, per batch
size, samples/s from the fastest step (and the median step time), and the data phase's
share of the step (its summed time over the summed step time); steps of
all variants are interleaved, so load from other processes hits every variant alike.
Variants add one change at a time to the previous one:
  baseline        NCHW, eager, SGD with the per-parameter for-loop
  foreach_sgd     + SGD(foreach=True): one multi-tensor kernel per op for all parameters
  fused_sgd       + SGD(fused=True) instead: momentum/Nesterov/weight decay in one kernel
  channels_last   + model and batches in channels_last memory format
  compiled        + torch.compile of the model (compile time reported apart, not averaged)
This is a benchmark, not a test: nothing here passes or fails. Random data makes the speed
representative (the step does the same work whatever the pixels), not the accuracy.

    python bench/resnet_throughput.py [--steps 12] [--warmup 3] [--batch-sizes 32,128]
    OMP_NUM_THREADS=1 python bench/resnet_throughput.py   # on an oversubscribed machine

On a machine whose cores other processes also use, intra-op threads wait for each other at
every barrier (a descheduled thread stalls its peers): the median step then runs several
times slower than the fastest one. The report records the load average and both figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from workloads.data.cifar10 import CifarAugment
from workloads.models.resnet.model import CifarResNet

NUM_IMAGES = 4096


@dataclass(frozen=True)
class Variant:
    name: str
    optimizer_impl: str  # "for-loop", "foreach" or "fused"
    channels_last: bool = False
    compiled: bool = False


VARIANTS = (
    Variant("baseline", "for-loop"),
    Variant("foreach_sgd", "foreach"),
    Variant("fused_sgd", "fused"),
    Variant("channels_last", "fused", channels_last=True),
    Variant("compiled", "fused", channels_last=True, compiled=True),
)


def make_optimizer(params: Any, impl: str) -> torch.optim.Optimizer:
    flags = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    return torch.optim.SGD(
        params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4, **flags[impl]
    )


class Trainee:
    """One variant's model, optimizer and data, ready to take steps."""

    def __init__(self, variant: Variant, batch_size: int, device: torch.device) -> None:
        torch.manual_seed(0)
        fmt = torch.channels_last if variant.channels_last else torch.contiguous_format
        self.images = torch.randint(0, 256, (NUM_IMAGES, 3, 32, 32), dtype=torch.uint8).to(device)
        self.labels = torch.randint(0, 10, (NUM_IMAGES,)).to(device)
        self.augment = CifarAugment(
            mean=torch.full((1, 3, 1, 1), 120.0, device=device),
            inv_std=torch.full((1, 3, 1, 1), 1 / 64, device=device),
            memory_format=fmt,
        )
        # torch's type stubs leave out Module.to's memory_format, which it takes.
        model = CifarResNet(20, "m1").to(device, memory_format=fmt).train()  # type: ignore[call-overload]
        self.optimizer = make_optimizer(model.parameters(), variant.optimizer_impl)
        self.forward = torch.compile(model) if variant.compiled else model
        self.generator = torch.Generator(device).manual_seed(0)
        self.batch_size = batch_size
        self.steps_done = 0
        self.device = device
        self.sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None

    def step(self) -> tuple[float, float, float]:
        """(data, optimizer, whole step) seconds of one training step (on CUDA, the device
        synchronized before each clock reading)."""
        self.sync()
        t0 = time.perf_counter()
        start = (self.steps_done * self.batch_size) % (NUM_IMAGES - self.batch_size)
        index = torch.arange(start, start + self.batch_size, device=self.device)
        x, y = self.augment(self.images[index], self.generator), self.labels[index]
        self.sync()
        t1 = time.perf_counter()
        loss = F.cross_entropy(self.forward(x), y)
        loss.backward()
        self.sync()
        t2 = time.perf_counter()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        self.sync()
        t3 = time.perf_counter()
        return t1 - t0, t3 - t2, t3 - t0


def measure(
    variants: list[Variant], batch_size: int, steps: int, warmup: int, device: torch.device
) -> dict[str, dict[str, Any]]:
    """Steps of all variants interleaved round-robin, so that load from other processes on a
    shared machine slows every variant alike instead of whichever ran at the time."""
    trainees: dict[str, Trainee] = {}
    results: dict[str, dict[str, object]] = {}
    for v in variants:
        try:
            trainee = Trainee(v, batch_size, device)
            t0 = time.perf_counter()
            for _ in range(warmup):
                trainee.step()
            trainees[v.name] = trainee
            results[v.name] = {"warmup_s": time.perf_counter() - t0}  # compilation included
        except Exception as err:  # a variant this machine cannot run (no compiler, ...)
            results[v.name] = {"error": f"{type(err).__name__}: {err}"}
    timed: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trainees}
    for _ in range(steps):
        for name, trainee in trainees.items():
            timed[name].append(trainee.step())
    for name, times in timed.items():
        data_s, optimizer_s, step_s = ([t[i] for t in times] for i in range(3))
        results[name].update(
            # From the fastest step, as timeit does: on a shared machine it is the one least
            # disturbed by other processes; the median shows how much they disturbed.
            samples_per_s=batch_size / min(step_s),
            samples_per_s_at_median=batch_size / statistics.median(step_s),
            step_ms_min=1000 * min(step_s),
            step_ms_median=1000 * statistics.median(step_s),
            data_ms_median=1000 * statistics.median(data_s),
            optimizer_ms_median=1000 * statistics.median(optimizer_s),
            data_share=sum(data_s) / sum(step_s),
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--batch-sizes", default="32,128")
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    chosen = [v for v in VARIANTS if v.name in args.variants.split(",")]
    results: dict[str, dict[str, Any]] = {v.name: {} for v in chosen}
    for batch_size in batch_sizes:
        for name, figures in measure(chosen, batch_size, args.steps, args.warmup, device).items():
            results[name][str(batch_size)] = figures
    print(json.dumps(report(results, batch_sizes, args), indent=2))


def report(results: dict[str, dict[str, Any]], batch_sizes: list[int], args: Any) -> dict[str, Any]:
    """The measurements, plus each variant's speed-up over the previous one and the baseline."""
    names = list(results)
    gains: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(names):
        gains[name] = {}
        for b in map(str, batch_sizes):
            gains[name][b] = {}
            for key, label in (("samples_per_s", "fastest"), ("samples_per_s_at_median", "median")):
                now = results[name][b].get(key)
                prev = results[names[i - 1]][b].get(key) if i else None
                base = results[names[0]][b].get(key)
                gains[name][b][label] = {
                    "vs_previous": round(now / prev, 3) if now and prev else None,
                    "vs_baseline": round(now / base, 3) if now and base else None,
                }
    return {
        "benchmark": "resnet20 training throughput, one process",
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "logical_cpus": os.cpu_count(),
            "load_average_1m_at_end": os.getloadavg()[0],
            "torch": torch.__version__,
        },
        "settings": {"steps": args.steps, "warmup_steps": args.warmup, "device": args.device},
        # What resnet20-cifar10 runs with, given these measurements (see the module doc).
        "workload_uses": {
            "memory_format": "channels_last (registry)",
            "optimizer": "SGD(fused=True) (workloads/train.py)",
            "torch_compile": "on (registry): every batch shape compiled before the clock, "
            "the kernels cached under the data root so a machine compiles once "
            "(workloads/runtime/compiling.py); the eager model where no C++ compiler is found",
        },
        "results": results,
        "speedups": gains,
    }


if __name__ == "__main__":
    main()
