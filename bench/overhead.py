"""stackbench's own overhead, printed as JSON figures (not a pass/fail test).

- `runner --help` wall time (the CLI must start without importing torch);
- cnn-digits step throughput in one process: stackbench's training path (workloads.train.run,
  with its phase timers, strategy and event log) against a bare hand-written PyTorch loop on
  the same model, data, batch and optimizer. Rounds alternate between the two so machine
  noise hits both alike; the ratio of medians is our overhead.

Usage: python bench/overhead.py [--rounds 5] [--epochs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from one_process import run_quietly, single_rank_environment

from runner.job.benchmarks import CNN_DIGITS
from workloads.data.digits import load_digits
from workloads.models.cnn.model import DigitsCNN


def cli_help_s(repeats: int = 5) -> float:
    runner = Path(sys.executable).with_name("runner")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([str(runner), "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def stackbench_samples_per_s(epochs: int) -> float:
    """In one process the configured strategy runs as `local` (workloads/strategies/local.py)."""
    config = CNN_DIGITS.config.replace(max_epochs=epochs, stop_at_target=False)
    return run_quietly(config)["throughput_samples_per_s"]


def bare_samples_per_s(epochs: int) -> float:
    """The loop a person would write by hand: same model, data, batch, optimizer, shuffling."""
    cfg = CNN_DIGITS.config
    torch.manual_seed(cfg.run.seed)
    splits = load_digits(torch.device("cpu"))
    model = DigitsCNN()
    opt = torch.optim.SGD(
        model.parameters(),
        lr=cfg.schedule.lr,
        momentum=cfg.optimizer.momentum,
        weight_decay=cfg.optimizer.weight_decay,
    )
    samples, elapsed, first = 0, 0.0, True
    for epoch in range(epochs):
        order = torch.randperm(splits.num_train, generator=torch.Generator().manual_seed(epoch))
        for index in torch.split(order, cfg.data.batch_size):
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(splits.train_x[index]), splits.train_y[index])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if first:  # warm-up step excluded, as stackbench's summary does
                first = False
                continue
            elapsed += time.perf_counter() - t0
            samples += len(index)
    return samples / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args()
    single_rank_environment()
    figures: dict[str, list[float]] = {"bare": [], "stackbench": []}
    for _ in range(args.rounds):
        figures["bare"].append(bare_samples_per_s(args.epochs))
        figures["stackbench"].append(stackbench_samples_per_s(args.epochs))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    print(json.dumps({
        "runner_help_s": round(cli_help_s(), 3),
        "runner_help_target_s": 0.5,
        "cnn_digits_one_process_samples_per_s": {k: round(v) for k, v in medians.items()},
        "per_round_samples_per_s": {k: [round(x) for x in v] for k, v in figures.items()},
        "ratio_stackbench_to_bare": round(medians["stackbench"] / medians["bare"], 3),
        "ratio_target": 0.95,
        "rounds": args.rounds,
        "epochs_per_round": args.epochs,
        "torch_threads": torch.get_num_threads(),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
