"""One rank of bench/shaped_network.py: times every strategy's training iterations.

    python bench/shaped_rank.py SETTINGS_JSON OUT_JSON

Run by shaped_network.py with the torchrun variables set (inside a worker's namespaces for a
shaped link), or with WORLD_SIZE=1 for the one-process baseline. Per strategy it builds the
same model from the same seed, trains `iters` iterations on this rank's synthetic CIFAR-shaped
batch (global batch split over the ranks) and records each iteration's step time and its
communication (the exposed part, as workloads.telemetry.timing measures it). Nothing here asserts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.iterations import iterations


def main() -> None:
    settings, out = json.loads(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)  # one core per worker, as one node each
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        dist.init_process_group("gloo")
    results = {
        name: iterations(name, rank, world_size, settings) for name in settings["strategies"]
    }
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
