"""Run a function on N gloo ranks in fresh processes and collect what each returns.

For tests of distributed code: `run_ranks(fn, world_size=2, **kwargs)` calls fn(rank,
world_size, **kwargs) on every rank inside an initialized process group and returns the
results in rank order. fn must be a module-level function (processes are spawned). A rank
that raises fails the call with that rank's traceback.
"""

from __future__ import annotations

import gc
import io
import os
import queue as queue_lib
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A hang guard, not a speed limit: on a loaded machine (load 20 on 2 cores, 8 engineers'
# suites at once) two ranks that import torch and step a small DDP model took over 60 s, the
# guard several tests had, and failed as hung. Below pytest-timeout's 300 s, so that this
# message, which says the ranks hung, is the one a real hang shows.
HANG_GUARD_S = 240.0


def run_ranks(
    fn: Callable[..., Any], world_size: int = 2, timeout_s: float = HANG_GUARD_S, **kwargs: Any
) -> list[Any]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(fn, rank, world_size, port, kwargs, results))
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    collected: dict[int, Any] = {}
    try:
        for _ in range(world_size):
            rank, ok, value = results.get(timeout=timeout_s)
            if not ok:
                raise AssertionError(f"rank {rank} failed:\n{value}")
            collected[rank] = _loads(value)
    except queue_lib.Empty:
        raise AssertionError(f"ranks did not finish within {timeout_s} s") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    return [collected[r] for r in range(world_size)]


def _dumps(value: Any) -> bytes:
    # By value: a tensor put on a multiprocessing queue as is travels as shared memory that
    # dies with the rank's process, which exits right after ("Connection reset by peer").
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _loads(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=False)


def _entry(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    kwargs: dict[str, Any],
    results: Any,
) -> None:
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
    )  # fmt: skip
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        value = fn(rank, world_size, **kwargs)
        gc.collect()  # see workloads/runtime/dist.py shutdown(): no reducer may outlive the group
        dist.barrier()
        dist.destroy_process_group()
        results.put((rank, True, _dumps(value)))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
