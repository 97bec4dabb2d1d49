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
workloads/optimization/sgd.py). Rounds alternate the order of the three. Ratios are
of medians. A speed benchmark, not a test.

With --cli it measures instead how fast the CLI itself starts: `runner --help` and `runner
benchmarks` against `python -c pass` (the same interpreter, so the ratio is what the runner
adds to Python's own start), by wall time and by CPU time (user + system, which other work
on a shared machine disturbs less), and checks the budget: within CLI_BUDGET_RATIO of
Python's start. `python -c "import click"` is measured beside them: the floor of any path
through click, which both commands now stay under by not importing it (runner/cli/start.py
replays the reply click gave the first time, from a cache). Every command runs as a user's
does the second time: with its bytecode cached (PYTHONPYCACHEPREFIX, a temporary tree, filled
by one warm-up round; a shell with PYTHONDONTWRITEBYTECODE would otherwise compile every
module at every start) and so with the replies and `runner benchmarks`' cards cached beside
it (runner/stamped.py), from a folder with no ./results in it (as a new user's). With
--instructions it counts instead the user-space instructions each runs (valgrind's callgrind,
once each, about 50x slower): what neither other work on the machine nor its clock changes,
so a change of a few percent shows. tests/runner/test_cli_startup.py holds both to click's
own output and lists what they must not import.

Usage: python bench/startup.py [--rounds 5] | python bench/startup.py --cli [--rounds 15]
       [--instructions]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
    # --log-dir: without it torchrun leaves a torchelastic_* folder in /tmp (DefaultLogsSpecs).
    with tempfile.TemporaryDirectory(prefix="bench-torchrun-") as logs:
        t0 = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
             f"--log-dir={logs}", str(script)],
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


CLI_BUDGET_RATIO = 2.0  # issue 33: `runner --help` and `runner benchmarks` within 2x


def timed(
    argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `argv` in `cwd`, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=env, cwd=cwd)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def cli_sides() -> dict[str, list[str]]:
    """The commands --cli compares, by what the output calls them (run in an empty folder)."""
    runner = str(Path(sys.executable).with_name("runner"))
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import click'": [sys.executable, "-c", "import click"],
        "runner --help": [runner, "--help"],
        "runner benchmarks": [runner, "benchmarks"],
    }


def warm_env(pyc: str) -> dict[str, str]:
    """The environment of a user's second start: bytecode cached, here under `pyc`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": pyc}


def instructions(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """User-space instructions of one run of `argv` in `cwd`, counted by callgrind."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
        check=True,
    )  # fmt: skip
    return int(done.stderr.split("Collected : ")[1].split()[0])


def cli_instructions() -> dict[str, object]:
    if shutil.which("valgrind") is None:
        sys.exit("--instructions counts with valgrind: apt-get install valgrind")
    with tempfile.TemporaryDirectory() as here, tempfile.TemporaryDirectory() as pyc:
        env, sides = warm_env(pyc), cli_sides()
        for argv in sides.values():  # the warm-up: bytecode, cards and replies cached
            timed(argv, env, here)
        counts = {name: instructions(argv, env, here) for name, argv in sides.items()}
    base, floor = counts["python -c pass"], counts["python -c 'import click'"]
    return {
        "instructions_M": {k: round(v / 1e6) for k, v in counts.items()},
        "ratio_to_python": {k: round(v / base, 2) for k, v in counts.items()},
        "ratio_to_click_floor": {k: round(v / floor, 2) for k, v in counts.items()},
        "budget": CLI_BUDGET_RATIO,
    }


def cli_startup(rounds: int) -> dict[str, object]:
    """Medians over rounds that rotate which command goes first."""
    with tempfile.TemporaryDirectory() as here, tempfile.TemporaryDirectory() as pyc:
        env, sides = warm_env(pyc), cli_sides()
        names = list(sides)
        for argv in sides.values():  # the warm-up: bytecode, cards and replies cached
            timed(argv, env, here)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(timed(sides[name], env, here))
    wall = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
    cpu = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
    base, floor = "python -c pass", "python -c 'import click'"
    out: dict[str, object] = {
        "median_wall_s": {k: round(v, 3) for k, v in wall.items()},
        "median_cpu_s": {k: round(v, 3) for k, v in cpu.items()},
    }
    for name in names[1:]:
        by_wall, by_cpu = wall[name] / wall[base], cpu[name] / max(cpu[base], 1e-3)
        ratios: dict[str, object] = {"wall": round(by_wall, 2), "cpu": round(by_cpu, 2)}
        if name != floor:
            ratios |= {
                "budget": CLI_BUDGET_RATIO,
                "met": "met" if by_wall <= CLI_BUDGET_RATIO else "not met",
                "wall_to_click_floor": round(wall[name] / wall[floor], 2),
            }
        out[f"{name}: ratio to python"] = ratios
    out |= {"rounds": rounds, "load_average_1m_at_end": os.getloadavg()[0]}
    return out


def ratio(medians: dict[str, float], reference: str) -> float:
    return round(medians["stackbench"] / medians[reference], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None, help="5; with --cli 15")
    parser.add_argument("--cli", action="store_true", help="the CLI's own start-up instead")
    parser.add_argument("--instructions", action="store_true",
                        help="with --cli: count instructions (valgrind), not time")  # fmt: skip
    args = parser.parse_args()
    if args.cli and args.instructions:
        print(json.dumps(cli_instructions(), indent=2))
        return
    if args.cli:
        print(json.dumps(cli_startup(args.rounds or 15), indent=2))
        return
    args.rounds = args.rounds or 5
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
