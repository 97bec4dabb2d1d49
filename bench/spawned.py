"""A bench's ranks as spawned processes on this machine, each result back through a queue.

Every rank gets torchrun's variables (a free local port for rank 0's store) and runs
`target(rank, world_size, job)`; what it returns comes back by rank. A rank that dies ends
the wait at once, naming it (its traceback is above, on stderr), where a plain queue read
would wait out the whole timeout; and no rank outlives the call.
"""

from __future__ import annotations

import os
import queue as queue_lib
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

POLL_S = 0.5


def run_ranks(
    target: Callable[[int, int, Any], Any], world_size: int, job: Any, timeout_s: float, what: str
) -> dict[int, Any]:
    """{rank: target's return} of every rank, or SystemExit saying which rank failed or that
    no result came within `timeout_s`. `target` must be a module-level function (spawned)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank, args=(target, r, world_size, port, job, out))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world_size:
            try:
                rank, value = out.get(timeout=POLL_S)
            except queue_lib.Empty:
                _check(procs, results, what)
                if time.monotonic() > deadline:
                    raise SystemExit(f"{what}: no result in {timeout_s:g} s") from None
                continue
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=30 if len(results) == world_size else 0)
            if p.is_alive():
                p.kill()
                p.join()
    return results


def _check(procs: list[Any], results: dict[int, Any], what: str) -> None:
    """SystemExit naming the first rank that failed without a result. (One that exited 0
    put its result first, _rank's last act: it may still be in the pipe, so it is not judged.)"""
    for rank, p in enumerate(procs):
        if rank in results or not p.exitcode:
            continue
        if p.exitcode < 0:
            how = f"was killed by {signal.Signals(-p.exitcode).name}"
        else:
            how = f"exited with code {p.exitcode}"
        raise SystemExit(f"{what}: rank {rank} {how} before its result (its error is above)")


def _rank(
    target: Callable[[int, int, Any], Any],
    rank: int,
    world_size: int,
    port: int,
    job: Any,
    out: Any,
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank))
    os.environ.update(LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    out.put((rank, target(rank, world_size, job)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
