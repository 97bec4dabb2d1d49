"""One rank of shaped_ranks.run_ranks: `python -m tests.runner.network.rank_entry
MODULE:FUNCTION KWARGS_JSON RESULT_PATH`, with the torchrun variables in the environment."""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    target, kwargs, result_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    value = fn(int(os.environ["RANK"]), dist.get_world_size(), **kwargs)
    gc.collect()  # see workloads/runtime/dist.py shutdown(): no reducer may outlive the group
    dist.barrier()
    dist.destroy_process_group()
    torch.save(value, result_path)


if __name__ == "__main__":
    main()
