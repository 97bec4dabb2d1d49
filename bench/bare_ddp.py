"""The bare side of bench/fair_scaling.py: cnn-digits' model trained by a plain torchrun script.

What a user would write without stackbench: scikit-learn's digits as tensors, the same
DigitsCNN, DDP over gloo, torch.optim.SGD with the benchmark's momentum and weight decay,
32 samples per worker, the LR scaled linearly. No timers but the loop's, no evaluation, no
event log. Run it under torchrun, with the threads per worker in OMP_NUM_THREADS as torchrun's
user would set them:

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        bench/bare_ddp.py --epochs 10

Its step time is clocked as stackbench's summary clocks step_time_ms (workloads/telemetry/
summary.py): the training loop's wall time, what runs between steps included (here the
epoch's shuffle), less the first (warm-up) step, over the steps after it; each epoch ends with
the shard's short remainder, as stackbench's does, so both sides take the same steps. Rank 0
prints one JSON line: that mean in ms, the mean of the steps alone (its own perf_counter
around each), the steps, and the process's CPU time per steady step (every thread's).
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
    # Equal shards (as DistributedSampler's drop_last), so every rank takes the same steps.
    shard = train[rank::world][: len(train) // world]
    model = DistributedDataParallel(DigitsCNN(10))
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr * world, momentum=0.9, weight_decay=1e-4
    )
    step_s: list[float] = []
    generator = torch.Generator().manual_seed(rank)
    loop_t0 = time.perf_counter()
    steady_cpu_t0 = 0.0
    for _ in range(args.epochs):
        order = shard[torch.randperm(len(shard), generator=generator)]
        for start in range(0, len(order), args.batch_size):
            t0 = time.perf_counter()
            index = order[start : start + args.batch_size]
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step_s.append(time.perf_counter() - t0)
            if len(step_s) == 1:  # the warm-up step ends: the steady CPU clock starts
                steady_cpu_t0 = time.process_time()
    loop_s = time.perf_counter() - loop_t0
    steady = len(step_s) - 1
    cpu_ms = 1000 * (time.process_time() - steady_cpu_t0) / steady
    if rank == 0:
        print(json.dumps({
            "step_time_ms": 1000 * (loop_s - step_s[0]) / steady,
            "steps_alone_ms": 1000 * sum(step_s[1:]) / steady,
            "cpu_ms": cpu_ms, "steps": len(step_s), "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "omp": os.environ.get("OMP_NUM_THREADS"),
        }), flush=True)  # fmt: skip
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
