"""The CS744 data-parallel comparison on this machine (shared/BENCHMARKS.md, VGG-11 study).

Per-iteration time (mean of iterations 2-40, the slowest rank's) for one process and for each
communication strategy at 2 and 4 processes (gloo on CPU), with speedups over one process,
as a table; then the published ordering (DDP fastest, gather/scatter slowest, every strategy
faster than one process) is checked and every difference is explained from what was measured.

The model is VGG-11-BN when workloads.models.vgg.model exists (the study's model); otherwise
the largest model this checkout has, and the output says so. Data are synthetic CIFAR-shaped
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
import queue as queue_lib
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.explain import explain_ordering

STUDY_STRATEGIES = ("gather-scatter", "allreduce-per-param", "allreduce", "ddp")
PUBLISHED_S = {"single": 1.855, "gather-scatter": 1.304, "allreduce-per-param": 0.932, "ddp": 0.664}


def build_model() -> tuple[nn.Module, tuple[int, ...], str]:
    """(model, one sample's shape, what it is)."""
    try:
        from workloads.models.vgg.model import VGG  # type: ignore[import-not-found]

        return VGG(num_classes=10), (3, 32, 32), "VGG-11-BN (the study's model)"
    except ImportError:
        from workloads.models.cnn.model import DigitsCNN

        note = (
            "DigitsCNN, 0.14 M parameters, 8x8 inputs: VGG-11-BN (workloads/models/vgg/model.py) "
            "is not in this checkout yet; this is the largest model it has. Rerun after the "
            "models branch is merged for the study's model (9.2 M parameters)."
        )
        return DigitsCNN(10), (1, 8, 8), note


def rank_times(rank: int, world_size: int, strategy: str, args: dict[str, Any]) -> dict:
    """Per-iteration step times and communication times of one rank."""
    import torch.distributed as dist

    from runner.job.benchmarks import CNN_DIGITS
    from workloads import strategies
    from workloads.timing import CpuClock, StepTimer

    torch.manual_seed(0)  # the same initial model everywhere
    model, shape, _ = build_model()
    batch = args["global_batch"] // world_size
    generator = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(batch, *shape, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    clock = CpuClock()
    timer = StepTimer(clock)
    if strategy == "single":
        strat = None
    else:
        config = CNN_DIGITS.config.replace(strategy=strategy, **args["options"].get(strategy, {}))
        strat = strategies.build(config, model, clock)
    module = model if strat is None else strat.module
    steps, comms = [], []
    for _ in range(args["iters"]):
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
    if dist.is_initialized():
        import gc

        gc.collect()  # no DDP reducer may outlive the group (see workloads/dist.py)
        dist.barrier()
    return {"steps_s": steps, "comm_s": comms}


def _entry(rank: int, world_size: int, port: int, strategy: str, args: dict, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    import torch.distributed as dist

    if strategy != "single":
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    result = rank_times(rank, world_size, strategy, args)
    if dist.is_initialized():
        dist.destroy_process_group()
    out.put((rank, result))


def measure(strategy: str, world_size: int, args: dict[str, Any]) -> dict[str, float]:
    """Mean over iterations 2..iters of the slowest rank, and its communication share."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        ctx.Process(target=_entry, args=(r, world_size, port, strategy, args, out))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=args["timeout_s"])[1] for _ in procs]
    except queue_lib.Empty:
        raise SystemExit(f"{strategy} x{world_size}: no result in {args['timeout_s']} s") from None
    finally:
        for p in procs:
            p.join(timeout=30)
    means = [statistics.fmean(r["steps_s"][1:]) for r in results]  # iterations 2..N
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
    model, _, about = build_model()
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"model: {about}")
    print(f"{params_m:.2f} M parameters; global batch {ns.global_batch}; mean of iterations "
          f"2-{ns.iters}; gloo on {os.cpu_count()} CPU cores of this machine")  # fmt: skip
    t0 = time.perf_counter()
    rows = [{"strategy": "single", "workers": 1, **measure("single", 1, args)}]
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
        ns.json.write_text(json.dumps({"model": about, "rows": rows}, indent=2) + "\n")


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
