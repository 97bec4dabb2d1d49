"""The bare side of bench/fair_scaling.py: cnn-digits' model trained by a plain torchrun script.

What a user would write without stackbench: scikit-learn's digits as tensors, the same
DigitsCNN, DDP over gloo, torch.optim.SGD with the benchmark's momentum and weight decay,
32 samples per worker, the LR scaled linearly. No timers but one perf_counter per step, no
evaluation, no event log. Run it under torchrun, with the threads per worker in
OMP_NUM_THREADS as torchrun's user would set them:

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        bench/bare_ddp.py --epochs 10

Rank 0 prints one JSON line: the mean step time after the first step, in ms, and the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits  # type: ignore[import-untyped]
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.models.cnn.model import DigitsCNN


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    train = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))[: int(0.8 * len(y))]
    shard = train[rank::world]
    model = DistributedDataParallel(DigitsCNN(10))
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr * world, momentum=0.9, weight_decay=1e-4
    )
    times_s: list[float] = []
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.epochs):
        order = shard[torch.randperm(len(shard), generator=generator)]
        for start in range(0, len(order) - args.batch_size + 1, args.batch_size):
            t0 = time.perf_counter()
            index = order[start : start + args.batch_size]
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            times_s.append(time.perf_counter() - t0)
    steady = times_s[1:]
    if rank == 0:
        mean_ms = 1000 * sum(steady) / len(steady)
        threads = torch.get_num_threads()
        print(json.dumps({"step_time_ms": mean_ms, "steps": len(times_s), "threads": threads,
                          "omp": os.environ.get("OMP_NUM_THREADS")}), flush=True)  # fmt: skip
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
