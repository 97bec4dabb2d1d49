"""Do stackbench's defaults time a step as a bare torchrun script does, at 1 and N workers?

Issue 33: a scaling sweep gave one worker the machine's threads and N workers a share each, so
its "speedup" measured the thread pool. Now a sweep holds each worker's threads constant
(runner/job/threads.py). This checks that what a step costs under those defaults is what the
same model costs in a bare torchrun script (bench/bare_ddp.py) given the same threads per
worker: the mean step time after the first, stackbench's from its summary (step_time_ms) and
the bare script's from its own clock, in rounds that alternate which side goes first. The
goal is within 5 % at every worker count.

    python bench/fair_scaling.py                       # workers 1,2; 3 rounds; 10 epochs
    python bench/fair_scaling.py --workers 1,2,4 --rounds 5

Prints a Markdown table and one JSON line; writes nothing but its runs (a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.job import threads  # noqa: E402

GOAL = 1.05


def stackbench_ms(results: Path, workers: int, per_worker: int, epochs: int) -> float:
    cmd = [sys.executable, "-m", "runner.cli", "--results-dir", str(results), "submit",
           "cnn-digits", "--workers", str(workers), "--threads", str(per_worker),
           "--set", "stop_at_target=false", "--set", f"max_epochs={epochs}",
           "--set", f"eval_every_epochs={epochs}"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"runner submit failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    newest = max((p for p in results.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    summary = json.loads((newest / "summary.json").read_text())
    return float(summary["step_time_ms"])


def bare_ms(workers: int, per_worker: int, epochs: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(per_worker)}
    # --log-dir: without it torchrun leaves a torchelastic_* folder in /tmp (DefaultLogsSpecs).
    with tempfile.TemporaryDirectory(prefix="bench-torchrun-") as logs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={workers}", f"--log-dir={logs}",
               str(REPO / "bench" / "bare_ddp.py"), "--epochs", str(epochs)]  # fmt: skip
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bare torchrun failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("{"))
    return float(json.loads(line)["step_time_ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    per_worker = threads.share(max(counts))  # what `runner sweep` gives every cell
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in counts:
            ours: list[float] = []
            bare: list[float] = []
            for r in range(args.rounds):
                sides = [("ours", ours), ("bare", bare)]
                for side, out in sides if r % 2 == 0 else reversed(sides):
                    if side == "ours":
                        out.append(stackbench_ms(Path(tmp), workers, per_worker, args.epochs))
                    else:
                        out.append(bare_ms(workers, per_worker, args.epochs))
            ratios = [o / b for o, b in zip(ours, bare, strict=True)]
            ratio = statistics.median(ours) / statistics.median(bare)
            rows.append({"workers": workers, "threads_per_worker": per_worker,
                         "stackbench_ms": statistics.median(ours),
                         "bare_ms": statistics.median(bare), "ratio": ratio,
                         "round_ratios": ratios, "met": ratio <= GOAL})  # fmt: skip
    print(
        f"{threads.cores()} cores, load {os.getloadavg()[0]:.1f} at the end, "
        f"{per_worker} thread(s) per worker, {args.rounds} rounds of {args.epochs} epochs\n"
    )
    print("| workers | stackbench step (ms) | bare torchrun step (ms) | ratio | rounds | goal |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        rounds = ", ".join(f"{r:.2f}" for r in row["round_ratios"])
        goal = "**met**" if row["met"] else "**not met**"
        print(f"| {row['workers']} | {row['stackbench_ms']:.2f} | {row['bare_ms']:.2f} | "
              f"{row['ratio']:.3f}x | {rounds} | <= {GOAL}x: {goal} |")  # fmt: skip
    print("\n" + json.dumps(rows))


if __name__ == "__main__":
    main()
