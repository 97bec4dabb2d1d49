"""Run a function on gloo ranks inside a shaped network's worker namespaces, one process each.

`run_ranks(net, "tests.runner.network.rank_work:fn", tmp_path, **kwargs)` starts rank i in
worker i's namespaces (as the launcher does: gloo bound to the shaped interface, rendezvous at
worker 0's address), calls fn(rank, world_size, **kwargs) there inside an initialized process
group, and returns what each rank returned, in rank order. A rank that fails fails the call
with its output.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.backends.local.launch import SHAPED_MASTER_PORT
from runner.backends.local.network import INTERFACE, ShapedNetwork, address

REPO = Path(__file__).resolve().parents[3]


def run_ranks(
    net: ShapedNetwork, target: str, out_dir: Path, timeout_s: float = 120.0, **kwargs: Any
) -> list[Any]:
    world_size = net.num_workers
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": address(0),
        "MASTER_PORT": str(SHAPED_MASTER_PORT),
        "GLOO_SOCKET_IFNAME": INTERFACE,
        "OMP_NUM_THREADS": "1",
    }
    procs = []
    for rank in range(world_size):
        result = out_dir / f"rank-{rank}.pt"
        argv = [sys.executable, "-m", "tests.runner.network.rank_entry", target,
                json.dumps(kwargs), str(result)]  # fmt: skip
        procs.append(
            subprocess.Popen(
                net.command(rank, argv, str(REPO)),
                env={**env, "RANK": str(rank), "LOCAL_RANK": "0"},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for rank, (p, output) in enumerate(zip(procs, outputs, strict=True)):
        if p.returncode != 0:
            raise AssertionError(f"rank {rank} exited with {p.returncode}:\n{output}")
    return [_load(out_dir / f"rank-{rank}.pt") for rank in range(world_size)]


def _load(path: Path) -> Any:
    import torch

    return torch.load(io.BytesIO(path.read_bytes()), weights_only=False)
