"""How long stackbench takes to start a run and to come back from it, against bare torchrun.

Measured from outside, as a user waits, with 2 workers on this machine:
- launch to first step: from starting `runner submit cnn-digits --workers 2` to the run's
  run_start event (the first step starts there; everything before is set-up: the CLI, the
  local supervisor, each rank's process importing torch, data, model, optimizer, process
  group);
- end to return: from the run_stop event to `runner submit` returning.
The bare references are torchrun itself, with 2 workers that import torch, join the process
group and all-reduce one tensor (the floor any torchrun job pays), and the same plus one SGD
step of a small model (what a torch.optim training loop adds: torch.optim imports
torch._dynamo on its first step, about a second here; stackbench's SGD does not,
workloads/sgd.py). Rounds alternate the order of the three. Ratios are
of medians. A speed benchmark, not a test.

Usage: python bench/startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
{step}
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 0:
    print("FIRST_STEP_DONE", time.time(), flush=True)
dist.destroy_process_group()
"""
SGD_STEP = """
model = torch.nn.Linear(64, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 64)).sum().backward()
optimizer.step()
optimizer.zero_grad()
"""


def bare(script: Path) -> tuple[float, float]:
    """(launch to the all-reduce done, all-reduce done to torchrun's return), in seconds."""
    t0 = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(script)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    end = time.time()
    line = next(x for x in done.stdout.splitlines() if x.startswith("FIRST_STEP_DONE"))
    first = float(line.split()[1])
    return first - t0, end - first


def stackbench() -> tuple[float, float]:
    """(launch to run_start, run_stop to `runner submit` returning), in seconds."""
    runner = Path(sys.executable).with_name("runner")
    with tempfile.TemporaryDirectory() as results:
        t0 = time.time()
        subprocess.run(
            [str(runner), "--results-dir", results, "submit", "cnn-digits", "--workers", "2",
             "--set", "max_epochs=1"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        end = time.time()
        (events_path,) = Path(results).glob("*/events.jsonl")
        events = [json.loads(line) for line in events_path.read_text().splitlines()]
    at = {e["key"]: e["time_ms"] / 1000 for e in events if e["key"] in ("run_start", "run_stop")}
    return at["run_start"] - t0, end - at["run_stop"]


def ratio(medians: dict[str, float], reference: str) -> float:
    return round(medians["stackbench"] / medians[reference], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scripts:
        allreduce, sgd = Path(scripts, "allreduce.py"), Path(scripts, "sgd_step.py")
        allreduce.write_text(BARE.format(step=""))
        sgd.write_text(BARE.format(step=SGD_STEP))
        sides = {
            "bare_torchrun_allreduce": lambda: bare(allreduce),
            "bare_torchrun_sgd_step": lambda: bare(sgd),
            "stackbench": stackbench,
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        names = list(sides)
        for i in range(args.rounds):
            for name in names[i % 3 :] + names[: i % 3]:  # each goes first in turn
                times[name].append(sides[name]())
    start = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
    end = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
    print(json.dumps({
        "launch_to_first_step_s": {k: round(v, 2) for k, v in start.items()},
        "end_to_return_s": {k: round(v, 2) for k, v in end.items()},
        "per_round": {k: [[round(a, 2), round(b, 2)] for a, b in v] for k, v in times.items()},
        "ratio_launch_to_bare_allreduce": ratio(start, "bare_torchrun_allreduce"),
        "ratio_launch_to_bare_sgd_step": ratio(start, "bare_torchrun_sgd_step"),
        "ratio_target": 1.2, "end_to_return_target_s": 0.5,
        "rounds": args.rounds, "logical_cpus": os.cpu_count(),
        "load_average_1m_at_end": os.getloadavg()[0],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
