"""stackbench's own overhead, printed as JSON figures (not a pass/fail test).

- `runner --help` wall time (the CLI must start without importing torch);
- training throughput in one process, stackbench against a bare hand-written PyTorch loop on
  the same model, data, augmentation, batch and optimizer: cnn-digits, and ResNet-20 on
  CIFAR-format files of random images. stackbench's figure is its summary's, the samples of
  the steady steps over the training loop's wall time (workloads/telemetry/summary.py); the bare
  loop's is measured the same way, wall clock from before each epoch's shuffle to after its last
  step, less the first (warm-up) step on both sides, and both evaluate after every epoch
  outside their clocks. Rounds alternate which side goes first, so neither always runs on a
  warmer (or more disturbed) machine; the median of the rounds' ratios is our overhead.
- the same two steps interleaved in one process: stackbench's step (workloads.training.loop's
  train_step on the Trainer a run builds: its timers, strategy, objective, divergence check)
  and the bare loop's, alternating every step on the same batches, each timed on its own.
  Whole runs on a shared 2-core machine drift by a tenth between rounds, more than the 2 %
  this is about; steps a few milliseconds apart see the same machine. It leaves out what a
  run does between steps and epochs (bookkeeping, event log), which the first figure has.

Usage: python bench/overhead.py [--rounds 5] [--workloads cnn-digits,resnet20] [--device cpu]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.datagen writes the files

from bench.one_process import run_quietly, single_rank_environment, steady
from runner.job.benchmarks import CNN_DIGITS, RESNET20_CIFAR10
from tests.datagen import write_cifar10
from workloads import data, models
from workloads.configuration.train_config import TrainConfig
from workloads.data.config import LoadContext
from workloads.data.sampling import batches, epoch_shard
from workloads.runtime import cachedir, compiling
from workloads.training.loop import EVAL_BATCH_SIZE

RESNET_IMAGES_PER_FILE = 256  # 1,280 training images: 40 steps of 32 an epoch


def cli_help_s(repeats: int = 5) -> float:
    runner = Path(sys.executable).with_name("runner")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([str(runner), "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def stackbench_samples_per_s(config: TrainConfig, device: str) -> float:
    """workloads.training.run in this process; in one process the strategy runs as `local`.
    Open division: the ResNet data are not CIFAR-10's canonical split."""
    summary = run_quietly(config, "--device", device, "--open-division")
    assert summary is not None
    return steady(summary.throughput_samples_per_s)


def bare_samples_per_s(config: TrainConfig, device: str) -> float:
    """The loop a person would write by hand around the same model (compiled where the
    config compiles it), data, augmentation, optimizer and shuffling, evaluating after every
    epoch as the run does, its clock paused meanwhile: no timers, no strategy, no event log."""
    dev = torch.device(device)
    torch.manual_seed(config.run.seed)
    where = LoadContext(dev, seed=config.run.seed, memory_format=config.execution.memory_format)
    splits = config.data.load(where)
    bare = BareLoop.build(config, splits, dev)
    samples, train_s, first_step_s = 0, 0.0, 0.0
    for epoch in range(config.run.max_epochs):
        t0 = time.perf_counter()
        order = epoch_shard(splits.num_train, 1, 0, epoch, config.run.seed).to(dev)
        for index in batches(order, config.data.batch_size):
            step_t0 = time.perf_counter() if not first_step_s else 0.0
            bare.step(index)
            if not first_step_s:  # the warm-up step, left out as stackbench's summary does
                bare.sync()
                first_step_s = time.perf_counter() - step_t0
            else:
                samples += len(index)
        bare.sync()
        train_s += time.perf_counter() - t0
        _evaluate(bare.forward, splits)
    return samples / (train_s - first_step_s)


@dataclass(frozen=True)
class BareLoop:
    """The hand-written loop's model, optimizer and step: no timers, strategy or event log."""

    splits: data.Splits
    forward: Any  # the model, compiled where the config compiles it
    optimizer: Any
    generator: torch.Generator
    sync: Callable[[], None]

    @classmethod
    def build(cls, config: TrainConfig, splits: data.Splits, dev: torch.device) -> BareLoop:
        torch.manual_seed(config.run.seed)
        model = models.build(
            config.model, splits.num_classes, splits.sample_shape, config.execution.memory_format
        ).to(dev)
        optimizer = config.build_optimizer(model.parameters())
        forward = _compiled(model, config, splits) if config.execution.compile_model else model
        generator = torch.Generator(dev).manual_seed(config.run.seed)
        sync = torch.cuda.synchronize if dev.type == "cuda" else lambda: None
        return cls(splits, forward, optimizer, generator, sync)

    def step(self, index: torch.Tensor) -> None:
        x, y = self.splits.train_x[index], self.splits.train_y[index]
        if self.splits.augment is not None:
            x = self.splits.augment(x, self.generator)
        loss = F.cross_entropy(self.forward(x), y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def interleaved_step_ratio(config: TrainConfig, steps: int, device: str) -> dict[str, Any]:
    """Bare step time over stackbench's, steps alternating in this process (module doc)."""
    import torch.distributed as dist

    dev = torch.device(device)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    try:
        return _interleave(config, steps, dev)
    finally:
        gc.collect()  # no strategy may outlive the process group
        dist.destroy_process_group()


def _interleave(config: TrainConfig, steps: int, dev: torch.device) -> dict[str, Any]:
    from workloads import tasks
    from workloads.telemetry.mllog import EventLog
    from workloads.telemetry.timing import clock_for
    from workloads.training.loop import train_step

    torch.manual_seed(config.run.seed)
    task = tasks.build(tasks.Context(config, 0, 1, dev, clock_for(dev), EventLog(None, None)))
    trainer = task.current_trainer()  # type: ignore[attr-defined]
    splits = trainer.splits
    bare_loop = BareLoop.build(config, splits, dev)
    warmup = 20
    epochs = -(-(warmup + steps) * config.data.batch_size // splits.num_train) + 1
    order = [epoch_shard(splits.num_train, 1, 0, e, config.run.seed) for e in range(epochs)]
    index = list(batches(torch.cat(order).to(dev), config.data.batch_size))

    def ours(i: int) -> None:
        train_step(trainer, index[i], 0.0, i)
        trainer.timer.finish()

    times: dict[str, list[float]] = {"bare": [], "stackbench": []}
    sides = {"bare": lambda i: bare_loop.step(index[i]), "stackbench": ours}
    for i in range(warmup + steps):
        for side in ("bare", "stackbench") if i % 2 == 0 else ("stackbench", "bare"):
            bare_loop.sync()
            t0 = time.perf_counter()
            sides[side](i)
            bare_loop.sync()
            if i >= warmup:
                times[side].append(time.perf_counter() - t0)
    paired = [b / o for b, o in zip(times["bare"], times["stackbench"], strict=True)]
    return {
        "ratio_stackbench_to_bare": round(statistics.median(paired), 3),
        "ratio_of_total_times": round(sum(times["bare"]) / sum(times["stackbench"]), 3),
        "median_step_ms": {k: round(1000 * statistics.median(v), 3) for k, v in times.items()},
        "steps": steps,
    }


def _compiled(model: torch.nn.Module, config: TrainConfig, splits: data.Splits) -> Any:
    """As stackbench compiles: every batch shape, training and evaluation, beforehand."""
    compiled = compiling.compile_model(model, cachedir.compile_cache_dir())
    fmt = torch.channels_last if config.execution.memory_format == "channels_last" else None
    compiling.precompile(
        compiled,
        splits.sample_shape,
        compiling.batch_sizes(splits.num_train, config.data.batch_size),
        compiling.batch_sizes(splits.num_test, EVAL_BATCH_SIZE),
        fmt or torch.contiguous_format,
    )
    return compiled


@torch.no_grad()
def _evaluate(forward: Any, splits: data.Splits) -> None:
    forward.eval()
    for index in batches(torch.arange(splits.num_test), EVAL_BATCH_SIZE):
        forward(splits.test_x[index]).argmax(dim=1)
    forward.train()


def workload_configs(data_dir: Path, epochs: dict[str, int]) -> dict[str, TrainConfig]:
    return {
        "cnn-digits": CNN_DIGITS.config.replace(
            max_epochs=epochs["cnn-digits"], stop_at_target=False
        ),
        "resnet20": RESNET20_CIFAR10.config.replace(
            data_dir=str(data_dir),
            max_epochs=epochs["resnet20"],
            stop_at_target=False,
            warmup_epochs=0.0,  # one process: the warm-up would ramp from lr to lr anyway
            lr_milestones=(),
        ),
    }


def compare(config: TrainConfig, rounds: int, device: str) -> dict[str, Any]:
    figures: dict[str, list[float]] = {"bare": [], "stackbench": []}
    sides = {"bare": bare_samples_per_s, "stackbench": stackbench_samples_per_s}
    for i in range(rounds):
        order = ("bare", "stackbench") if i % 2 == 0 else ("stackbench", "bare")
        for side in order:
            figures[side].append(sides[side](config, device))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    # Each round's two sides ran back to back: their ratio cancels the machine's slower drifts.
    paired = [
        ours / bare for ours, bare in zip(figures["stackbench"], figures["bare"], strict=True)
    ]
    return {
        "samples_per_s": {k: round(v, 1) for k, v in medians.items()},
        "per_round_samples_per_s": {k: [round(x, 1) for x in v] for k, v in figures.items()},
        "ratio_stackbench_to_bare": round(statistics.median(paired), 3),
        "per_round_ratios": [round(r, 3) for r in paired],
        "ratio_of_medians": round(medians["stackbench"] / medians["bare"], 3),
        "epochs_per_round": config.run.max_epochs,
        "batch_size": config.data.batch_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", default="cnn-digits,resnet20")
    parser.add_argument("--digits-epochs", type=int, default=15)
    parser.add_argument("--resnet-epochs", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--interleaved-steps", type=int, default=2000)
    args = parser.parse_args()
    single_rank_environment()
    # What workloads.train's process does after its imports (workloads/training/launch.py):
    # without it, either side's first full collection walks every object torch created.
    gc.freeze()
    report: dict[str, object] = {"runner_help_s": round(cli_help_s(), 3)}
    report["runner_help_target_s"] = 0.5
    epochs = {"cnn-digits": args.digits_epochs, "resnet20": args.resnet_epochs}
    with tempfile.TemporaryDirectory() as data_dir:
        write_cifar10(Path(data_dir), RESNET_IMAGES_PER_FILE, RESNET_IMAGES_PER_FILE)
        configs = workload_configs(Path(data_dir), epochs)
        for name in args.workloads.split(","):
            compared = compare(configs[name], args.rounds, args.device)
            compared["interleaved_steps"] = interleaved_step_ratio(
                configs[name], args.interleaved_steps, args.device
            )
            report[name] = compared
    report |= {
        "ratio_target": 0.98,
        "rounds": args.rounds,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
