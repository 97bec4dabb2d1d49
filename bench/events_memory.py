"""Peak memory of `runner report` and `runner check` against the size of a run's events.jsonl:
flat, because both stream the file (contract.events.stream_lines) and keep only bounded
summaries of it (curves thinned to runner.results.runs.MAX_CURVE_POINTS; the compliance
checker handed only the events its rules name, capped at workloads.compliance's
MAX_CHECKED_BYTES).

A speed benchmark of our own code (not a pass/fail test). For each size it writes a run
directory (cnn-digits, in a temporary folder removed after) whose events.jsonl holds a real
run's header, then per-step events (a loss and the step's phases, as the training loop logs
them) with an epoch's events every 10,000 steps, then run_stop; then runs each command in a
process of its own and reads that process's peak RSS (ru_maxrss). It prints each command's
peak and its ratio to the smallest size's (the log passes `runner check`, so the checker does
all its work):

    python bench/events_memory.py                      # 10 MB, 100 MB, 1 GB (about 2 GB of disk)
    python bench/events_memory.py --sizes-mb 10,100    # quicker

Measured here (2 shared cores, load 2-4): 241 / 245 / 245 MiB for both commands at 10 MB /
100 MB / 1 GB (1.00x, 1.02x, 1.02x); the code before streaming took 1,034 MiB (report) and
1,720 MiB (check) at 100 MB.

Needs the report and test extras (matplotlib; mlperf-logging for `check`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RUN_ID = "events-memory"
STEPS_PER_EPOCH = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="10,100,1000", help="events.jsonl sizes, in MB")
    args = parser.parse_args()
    sizes_mb = [int(s) for s in args.sizes_mb.split(",")]
    peaks: dict[str, list[float]] = {"report": [], "check": []}
    print(f"{'events.jsonl':>14} {'report peak':>12} {'check peak':>12} {'report s':>9} "
          f"{'check s':>8}")  # fmt: skip
    for size_mb in sizes_mb:
        with tempfile.TemporaryDirectory(prefix="stackbench-events-memory-") as tmp:
            results = Path(tmp) / "results"
            written = make_run(results, size_mb << 20)
            row = [f"{written / 1e6:11.0f} MB"]
            times = []
            for command in ("report", "check"):
                peak_mib, took_s = measure(results, command, Path(tmp) / "out")
                peaks[command].append(peak_mib)
                row.append(f"{peak_mib:8.0f} MiB")
                times.append(f"{took_s:8.1f}")
            print(f"{row[0]:>14} {row[1]:>12} {row[2]:>12} {times[0]:>9} {times[1]:>8}")
    for command, values in peaks.items():
        ratios = ", ".join(f"{v / values[0]:.2f}x" for v in values)
        print(f"{command}: peak RSS against the {sizes_mb[0]} MB log: {ratios}")


def make_run(results: Path, size_bytes: int) -> int:
    """A finished cnn-digits run under `results` whose events.jsonl is about `size_bytes`."""
    from tests.runner.rundirs import make_run as make_rundir
    from tests.workloads.test_compliance import write_run

    run_dir = make_rundir(results, RUN_ID, 2, 30.0)
    header = Path(results) / "header"
    events = run_dir / "events.jsonl"
    # A real run's events (init, every parameter the rules check, epochs, evaluations) as the
    # workload writes them, then per-step events until the file is about the size asked.
    path = write_run(header, "cnn-digits", _cnn_digits_config(), bleu=(0.5, 0.97))
    lines = path.read_text().splitlines(keepends=True)
    stop = [line for line in lines if '"run_stop"' in line]
    body = [line for line in lines if '"run_stop"' not in line]
    with open(events, "w", encoding="utf-8") as f:
        f.writelines(body)
        written, step = sum(map(len, body)), 0
        last_ms = json.loads(body[-1])["time_ms"]
        while written < size_bytes:
            chunk = _steps(last_ms, step, STEPS_PER_EPOCH)
            f.write(chunk)
            written += len(chunk)
            step += STEPS_PER_EPOCH
        f.writelines(stop)
    return written


def _cnn_digits_config() -> Any:  # a TrainConfig, imported late
    from runner.job.benchmarks import BENCHMARKS

    return BENCHMARKS["cnn-digits"].config


def _steps(after_ms: int, first: int, count: int) -> str:
    """`count` steps' events and one epoch's: what a real loop logs, with times that grow."""
    epoch = first // count + 3  # after the header's two epochs
    at = after_ms + 1 + first
    out = [_line("epoch_start", None, at, epoch_num=epoch)]
    for step in range(first, first + count):
        out.append(_line("train_loss", 1.0 / (step + 1), at + step - first, step=step))
        phases = {"data": 0.0001, "forward": 0.002, "backward": 0.003, "communication": 0.001}
        out.append(_line("stackbench_step_phases", phases, at + step - first, step=step))
    out.append(_line("epoch_stop", None, at + count, epoch_num=epoch))
    return "".join(out)


def _line(key: str, value: object, time_ms: int, **metadata: object) -> str:
    event = {"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
             "value": value, "metadata": metadata}  # fmt: skip
    return json.dumps(event) + "\n"


def measure(results: Path, command: str, out_dir: Path) -> tuple[float, float]:
    """Peak RSS (MiB) and wall time of `runner COMMAND` on the run, in a process of its own."""
    argv = [sys.executable, "-m", "runner.cli", "--results-dir", str(results), command, RUN_ID]
    if command == "report":
        argv += ["--out", str(out_dir)]
    code = (
        "import resource, runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_module('runner.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(f'PEAK_KIB {peak_kib}', file=sys.stderr)\n"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *argv[2:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    took_s = time.perf_counter() - started
    peak = [line for line in done.stderr.splitlines() if line.startswith("PEAK_KIB ")]
    if not peak:
        raise SystemExit(f"runner {command} did not finish:\n{done.stdout}\n{done.stderr}")
    return int(peak[-1].split()[1]) / 1024, took_s


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
