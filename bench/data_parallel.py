"""The CS744 data-parallel comparison on this machine (docs/benchmarks.md, VGG-11 study).

Per-iteration time (mean of iterations 2-40, the slowest rank's) for one process and for each
communication strategy at 2 and 4 processes (gloo on CPU), with speedups over one process,
as a table; then the published ordering (DDP fastest, gather/scatter slowest, every strategy
faster than one process) is checked and every difference is explained from what was measured.

The model is VGG-11-BN, the study's (bench/iterations.py). Data are synthetic CIFAR-shaped
tensors made once per rank: data loading is not what is compared. Global batch 256 split
over the workers, SGD lr 0.1, momentum 0.9, weight decay 1e-4, fixed seed, as the study.
This is a speed benchmark, not a test: it asserts nothing.

Usage: python bench/data_parallel.py [--iters 40] [--global-batch 256] [--workers 2 4]
       [--strategies gather-scatter allreduce-per-param allreduce ddp] [--json out.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.explain import explain_ordering
from bench.iterations import iterations, vgg11
from bench.spawned import run_ranks

STUDY_STRATEGIES = ("gather-scatter", "allreduce-per-param", "allreduce", "ddp")
MODEL = "VGG-11-BN (the study's model)"
PUBLISHED_S = {"single": 1.855, "gather-scatter": 1.304, "allreduce-per-param": 0.932, "ddp": 0.664}


def _rank(rank: int, world_size: int, job: dict[str, Any]) -> dict[str, Any]:
    strategy, args = job["strategy"], job["args"]
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    import torch.distributed as dist

    if strategy != "single":
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    settings = {**args, "width_divisor": 1}
    result = iterations(strategy, rank, world_size, settings)
    if dist.is_initialized():
        dist.destroy_process_group()
    return result


def measure(strategy: str, world_size: int, args: dict[str, Any]) -> dict[str, float]:
    """Mean over iterations 2..iters of the slowest rank, and its communication share."""
    job = {"strategy": strategy, "args": args}
    what = f"{strategy} x{world_size}"
    results = list(run_ranks(_rank, world_size, job, args["timeout_s"], what).values())
    means = [statistics.fmean(r["step_s"][1:]) for r in results]  # iterations 2..N
    slowest = max(range(len(results)), key=lambda i: means[i])
    comm = statistics.fmean(results[slowest]["comm_s"][1:])
    return {"time_s": means[slowest], "comm_share": comm / means[slowest]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--strategies", nargs="+", default=list(STUDY_STRATEGIES))
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ns = parser.parse_args()
    args = {
        "iters": ns.iters, "global_batch": ns.global_batch, "timeout_s": ns.timeout_s,
        # Each strategy's own options (a key of one strategy is refused with another).
        "options": {"powersgd": {"powersgd_start_iter": 2}},
    }  # fmt: skip
    if ns.iters < 2:
        parser.error("--iters must be at least 2 (iteration 1 is warm-up, not averaged)")
    params_m = sum(p.numel() for p in vgg11().parameters()) / 1e6
    print(f"model: {MODEL}")
    print(f"{params_m:.2f} M parameters; global batch {ns.global_batch}; mean of iterations "
          f"2-{ns.iters}; gloo on {os.cpu_count()} CPU cores of this machine")  # fmt: skip
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = [
        {"strategy": "single", "workers": 1, **measure("single", 1, args)}
    ]
    for k in ns.workers:
        for name in ns.strategies:
            rows.append({"strategy": name, "workers": k, **measure(name, k, args)})
            print(f"  measured {name} x{k}: {rows[-1]['time_s']:.4f} s", file=sys.stderr)
    single_s = rows[0]["time_s"]
    for row in rows:
        row["speedup"] = single_s / row["time_s"]
    print(table(rows))
    print(f"(measured in {time.perf_counter() - t0:.0f} s)\n")
    for line in explain_ordering(rows, params_m, os.cpu_count() or 1):
        print(line)
    if ns.json is not None:
        ns.json.write_text(json.dumps({"model": MODEL, "rows": rows}, indent=2) + "\n")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'strategy':<22}{'workers':>8}{'s/iter':>10}{'speedup':>9}{'comm %':>8}"
        f"{'published s/iter (4 nodes)':>28}",
    ]
    for r in rows:
        published = PUBLISHED_S.get(r["strategy"]) if r["workers"] in (1, 4) else None
        lines.append(
            f"{r['strategy']:<22}{r['workers']:>8}{r['time_s']:>10.4f}{r['speedup']:>8.2f}x"
            f"{100 * r['comm_share']:>7.1f}%"
            + (f"{published:>28.3f}" if published is not None else f"{'':>28}")
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
