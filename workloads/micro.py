"""Entry point of `allreduce-micro` (task 0a): `python -m workloads.micro --config '<json>'`.

Launched exactly like workloads.train (torchrun, same arguments), so every backend runs it
unchanged. For each tensor size (log-spaced elements) and dtype it times back-to-back
all-reduces as nccl-tests does: after warm-up, `n` all-reduces between two synchronized clock
readings, time = elapsed / n, the slowest rank's time counts. Reported per size:
latency, algorithm bandwidth (bytes / time) and bus bandwidth (algbw * 2(n-1)/n, the traffic
each link carries in a ring all-reduce, comparable across world sizes). Rank 0 writes one
`allreduce_result` event per measurement, then summary.json and manifest.json. With a time
budget (`--set time_budget_s=N`) it stops before the first measurement that would start past
it, and the summary says so. It is not a training run: no model, no target; the summary's
`kind` says so.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as tdist

from contract import events
from contract.files import write_json
from contract.rundir import EVENTS, MANIFEST, SUMMARY
from contract.summary import MICRO as KIND
from contract.summary import Measurement, MicroSummary
from workloads.configuration.micro_config import AllReduceMicroConfig, MeasurementConfig, log_sizes
from workloads.runtime import dist
from workloads.telemetry import manifest, mllog
from workloads.training.launch import launch
from workloads.training.loop import Deadline


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: each rank sends and receives 2(n-1)/n of
    the data in a ring, so this is what the slowest link carried."""
    return algbw * 2 * (world_size - 1) / world_size


def measurement(
    elements: int, dtype: str, element_bytes: int, num_iters: int, time_s: float, world: int
) -> Measurement:
    size_bytes = elements * element_bytes
    algbw = size_bytes / time_s / 1e9 if time_s > 0 else math.inf
    return Measurement(
        elements, dtype, size_bytes, num_iters, time_s * 1e6, algbw, bus_bandwidth(algbw, world)
    )


def measure(
    config: MeasurementConfig, elements: int, dtype: str, device: torch.device
) -> Measurement:
    tensor = torch.ones(elements, dtype=getattr(torch, dtype), device=device)
    first_s = _timed(tensor, 1, device)  # the first call sets up buffers: warm-up, not timed
    iters = _agreed_iters(config, first_s, device)
    for _ in range(min(config.num_warmup_iters, iters)):
        tdist.all_reduce(tensor)
    time_s = _timed(tensor, iters, device) / iters
    slowest = torch.tensor([time_s], dtype=torch.float64, device=device)
    tdist.all_reduce(slowest, op=tdist.ReduceOp.MAX)
    world = tdist.get_world_size()
    return measurement(elements, dtype, tensor.element_size(), iters, float(slowest), world)


def _timed(tensor: torch.Tensor, iters: int, device: torch.device) -> float:
    _sync(device)
    tdist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        tdist.all_reduce(tensor)
    _sync(device)
    return time.perf_counter() - start


def _agreed_iters(config: MeasurementConfig, first_s: float, device: torch.device) -> int:
    """num_iters, fewer where they would not fit the time budget; rank 0's choice for all."""
    fit = int(config.max_time_per_size_s / max(first_s, 1e-9))
    iters = torch.tensor([max(1, min(config.num_iters, fit))], device=device)
    tdist.broadcast(iters, 0)
    return int(iters.item())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    return launch(argv, AllReduceMicroConfig, run)


def run(config: AllReduceMicroConfig, env: dist.DistEnv, args: Any) -> MicroSummary | None:
    is_writer = env.rank == 0
    if is_writer:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    log = (
        mllog.EventLog(str(args.output_dir / EVENTS), sys.stdout)
        if is_writer
        else mllog.RankLog(env.rank, sys.stdout)
    )
    log.start(events.INIT_START)
    device = dist.select_device(args.device, env)
    backend = dist.init(device, config.run.dist_timeout_s)
    env_manifest = manifest.build(args.run_id, env.world_size, backend, device, seed=0)
    log.point(events.SUBMISSION_BENCHMARK, args.benchmark or KIND)
    log.point(events.MANIFEST, env_manifest.to_dict())
    if is_writer:
        write_json(args.output_dir / MANIFEST, env_manifest.to_dict())
    log.end(events.INIT_STOP)
    start = time.perf_counter()
    log.start(events.RUN_START)
    results: list[Measurement] = []
    spec = config.measure
    sizes = log_sizes(spec.min_elements, spec.max_elements, spec.sizes_per_decade)
    deadline = Deadline(config.run.time_budget_s, start, device)
    cells = [(dtype, elements) for dtype in spec.dtypes for elements in sizes]
    for dtype, elements in cells:
        if deadline.expired():
            break
        results.append(measure(spec, elements, dtype, device))
        log.point(events.ALLREDUCE_RESULT, asdict(results[-1]), backend=backend, total=len(cells))
    summary = MicroSummary(
        run_id=args.run_id, benchmark=args.benchmark or KIND,
        division="open" if args.open_division else "closed", status="success",
        world_size=env.world_size, device=device.type, backend=backend,
        run_time_s=time.perf_counter() - start, results=tuple(results),
        stopped_by_time_budget=len(results) < len(cells),
    )  # fmt: skip
    log.point(events.SUMMARY, summary.to_dict())
    log.end(events.RUN_STOP, status="success")
    if is_writer:
        write_json(args.output_dir / SUMMARY, summary.to_dict())
    log.close()
    dist.shutdown()
    return summary if is_writer else None


if __name__ == "__main__":
    sys.exit(main())
