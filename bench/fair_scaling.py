"""Do stackbench's defaults time a step as a bare torchrun script does, at 1 and N workers?

Issue 33: a scaling sweep gave one worker the machine's threads and N workers a share each, so
its "speedup" measured the thread pool. Now a sweep holds each worker's threads constant
(runner/job/threads.py). This checks that what a step costs under those defaults is what the
same model costs in a bare torchrun script (bench/bare_ddp.py) given the same threads per
worker, in rounds that alternate which side goes first. The goal is within 5 % at every worker
count.

Both sides clock the same interval: step_time_ms of stackbench's summary is the training
loop's wall time (what runs between steps included: the epoch's end, its event lines) less the
first step, over the steps after it, and so is the bare script's; both take the same steps
(each epoch ends with the shard's short remainder). Until 2026-12-02 the bare script summed
its steps alone and dropped the remainder, which left stackbench's between-step time (about
2 % of its loop) and its cheaper short steps on one side only.

A third column runs stackbench's workload alone (`python -m workloads.train` with the job
`runner submit` would resolve, under torchrun as the bare script is), without the runner's
command and supervisor: stackbench/workload is what launching through the runner costs,
workload/bare what the training code costs. The load average is taken before every run.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.job import threads  # noqa: E402
from runner.job.spec import Placement, resolve, workload_argv  # noqa: E402

GOAL = 1.05
SIDES = ("stackbench", "workload", "bare")


def overrides(epochs: int) -> list[str]:
    return ["stop_at_target=false", f"max_epochs={epochs}", f"eval_every_epochs={epochs}"]


def stackbench_ms(tmp: Path, workers: int, per_worker: int, epochs: int) -> float:
    results = tmp / "results"
    cmd = [sys.executable, "-m", "runner.cli", "--results-dir", str(results), "submit",
           "cnn-digits", "--workers", str(workers), "--threads", str(per_worker),
           *(a for o in overrides(epochs) for a in ("--set", o))]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"runner submit failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    newest = max((p for p in results.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return summary_ms(newest)


def summary_ms(run_dir: Path) -> float:
    return float(json.loads((run_dir / "summary.json").read_text())["step_time_ms"])


def workload_ms(tmp: Path, workers: int, per_worker: int, epochs: int) -> float:
    """The workload `runner submit` would start, under torchrun (no runner process beside it)."""
    placement = Placement(procs_per_node=workers, threads_per_worker=per_worker)
    spec = resolve("cnn-digits", overrides(epochs), placement)
    out = tmp / spec.run_id
    entry = workload_argv(spec, str(out), str(out / "logs"))[1:]  # after the interpreter
    torchrun(tmp, workers, per_worker, entry)
    return summary_ms(out)


def bare_ms(tmp: Path, workers: int, per_worker: int, epochs: int) -> float:
    script = [str(REPO / "bench" / "bare_ddp.py"), "--epochs", str(epochs)]
    stdout = torchrun(tmp, workers, per_worker, script)
    line = next(x for x in stdout.splitlines() if x.startswith("{"))
    return float(json.loads(line)["step_time_ms"])


def torchrun(tmp: Path, workers: int, per_worker: int, entry: list[str]) -> str:
    env = {**os.environ, threads.ENV: str(per_worker)}
    # --log-dir: without it torchrun leaves a torchelastic_* folder in /tmp (DefaultLogsSpecs).
    with tempfile.TemporaryDirectory(prefix="bench-torchrun-", dir=tmp) as logs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={workers}", f"--log-dir={logs}", *entry]  # fmt: skip
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"torchrun {entry[:2]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


MEASURE: dict[str, Callable[[Path, int, int, int], float]] = {
    "stackbench": stackbench_ms, "workload": workload_ms, "bare": bare_ms,
}  # fmt: skip


def compare(tmp: Path, workers: int, per_worker: int, rounds: int, epochs: int) -> dict[str, Any]:
    ms: dict[str, list[float]] = {side: [] for side in SIDES}
    loads: list[float] = []
    for r in range(rounds):
        for side in SIDES if r % 2 == 0 else reversed(SIDES):
            loads.append(os.getloadavg()[0])
            ms[side].append(MEASURE[side](tmp, workers, per_worker, epochs))
    median = {side: statistics.median(v) for side, v in ms.items()}
    ratio = median["stackbench"] / median["bare"]
    return {"workers": workers, "threads_per_worker": per_worker,
            **{f"{side}_ms": median[side] for side in SIDES}, "ratio": ratio,
            "workload_ratio": median["workload"] / median["bare"],
            "round_ratios": [o / b for o, b in zip(ms["stackbench"], ms["bare"], strict=True)],
            "load": [min(loads), max(loads)], "met": ratio <= GOAL}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    per_worker = threads.share(max(counts))  # what `runner sweep` gives every cell
    with tempfile.TemporaryDirectory() as tmp:
        rows = [compare(Path(tmp), w, per_worker, args.rounds, args.epochs) for w in counts]
    print(
        f"{threads.cores()} cores, {per_worker} thread(s) per worker, "
        f"{args.rounds} rounds of {args.epochs} epochs\n"
    )
    print("| workers | stackbench step (ms) | workload under torchrun (ms) | bare torchrun (ms) "
          "| ratio | workload/bare | rounds | load | goal |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        rounds = ", ".join(f"{r:.2f}" for r in row["round_ratios"])
        load = f"{row['load'][0]:.1f}-{row['load'][1]:.1f}"
        goal = "**met**" if row["met"] else "**not met**"
        print(f"| {row['workers']} | {row['stackbench_ms']:.2f} | {row['workload_ms']:.2f} | "
              f"{row['bare_ms']:.2f} | {row['ratio']:.3f}x | {row['workload_ratio']:.3f}x | "
              f"{rounds} | {load} | <= {GOAL}x: {goal} |")  # fmt: skip
    print("\n" + json.dumps(rows))


if __name__ == "__main__":
    main()
