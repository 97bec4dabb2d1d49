"""One rank of bench/shaped_model.py: the strategies' iterations (bench/iterations.py) and
allreduce-micro's own timed all-reduces (workloads/micro.py's `measure`) on one link.

    python bench/shaped_model_rank.py SETTINGS_JSON OUT_JSON

Run inside a worker's namespaces with the torchrun variables set. Nothing here asserts.
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
from workloads.configuration.micro_config import MeasurementConfig
from workloads.micro import measure


def main() -> None:
    settings, out = json.loads(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)  # one core per worker, as one node each
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    results: dict[str, object] = {
        name: iterations(name, rank, world_size, settings) for name in settings["strategies"]
    }
    config = MeasurementConfig(num_iters=settings["micro_iters"], num_warmup_iters=1,
                               max_time_per_size_s=settings["micro_budget_s"])  # fmt: skip
    device = torch.device("cpu")
    results["allreduce-micro"] = [
        {"size_bytes": m.size_bytes, "time_s": m.time_us / 1e6}
        for m in (measure(config, n, "float32", device) for n in settings["micro_elements"])
    ]
    dist.barrier()
    dist.destroy_process_group()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
