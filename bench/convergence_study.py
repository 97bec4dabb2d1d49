"""Do a benchmark's defaults reach the target at every worker count the README shows?

Issue 33: at the old cnn-digits defaults (lr 0.05 a worker, scaled linearly, ramped over
one epoch), 2 of 10 four-worker runs ended at chance and "SUCCEEDED". This runs a real study
(`runner sweep`, one run at a time, seeds 0..N-1 at each worker count) and tabulates how many
runs of each cell reached the target, which missed (seed, final metric, whether they learned
at all) and the time to target. Which runs learn depends on the seed and the worker count,
not on the machine's load (gloo's all-reduce and one intra-op thread per worker are
deterministic), so a loaded machine makes the study slower, not different.

    python bench/convergence_study.py                          # cnn-digits, 1,2,4 x 10 runs
    python bench/convergence_study.py --set warmup_epochs=1,3  # candidates as a sweep axis
    python bench/convergence_study.py --study STUDY_ID         # tabulate a study already run

Writes nothing but the study's runs (under --results-dir) and prints a Markdown table; the
figures are in bench/convergence_study.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner.results import study as studies
from runner.results.runs import RunResult, load_run


def sweep(results: Path, benchmark: str, workers: str, runs: int, sets: Sequence[str]) -> str:
    """Run the study through the runner itself; returns its id."""
    before = {p.name for p in studies.studies_root(results).glob("*")}
    cmd = [sys.executable, "-m", "runner.cli", "--results-dir", str(results), "sweep",
           benchmark, "--workers", workers, "--runs", str(runs), "--threads", "1",
           *(arg for item in sets for arg in ("--set", item))]  # fmt: skip
    subprocess.run(cmd, check=False)
    made = {p.name for p in studies.studies_root(results).glob("*")} - before
    if len(made) != 1:
        raise SystemExit(f"expected one new study in {results}, found {sorted(made)}")
    return made.pop()


def table(results: Path, study_id: str) -> str:
    path = studies.find(results, study_id)
    if path is None:
        raise SystemExit(f"no study {study_id} in {results}")
    study = studies.load(path)
    cells: dict[tuple[int, tuple[tuple[str, str], ...]], list[RunResult]] = {}
    for planned in study.runs:
        if planned.run_id is not None:
            run = load_run(results / planned.run_id)
            cells.setdefault((planned.workers, planned.sets), []).append(run)
    lines = [
        f"study `{study.study_id}` ({study.state}), {study.benchmark}, fixed: "
        f"{' '.join(study.fixed) or 'nothing'}",
        "",
        "| workers | cell | reached | missed (seed: final) | epochs to target | median time (s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (workers, sets), runs in sorted(cells.items()):
        reached = [r for r in runs if r.converged]
        missed = [_miss(r) for r in runs if not r.converged]
        times = sorted(r.time_to_target_s for r in reached if r.time_to_target_s is not None)
        median = f"{times[len(times) // 2]:.1f}" if times else "-"
        epochs = sorted(
            r.train_summary.final.epoch
            for r in reached
            if r.train_summary and r.train_summary.final
        )
        span = f"{epochs[0]}-{epochs[-1]} (median {epochs[len(epochs) // 2]})" if epochs else "-"
        cell = ", ".join(f"{k}={v}" for k, v in sets) or "defaults"
        lines.append(f"| {workers} | {cell} | {len(reached)}/{len(runs)} | "
                     f"{'; '.join(missed) or '-'} | {span} | {median} |")  # fmt: skip
    return "\n".join(lines)


def _miss(run: RunResult) -> str:
    summary = run.train_summary
    if summary is None or summary.final is None:
        return f"seed {run.seed}: {run.state}, no result"
    verdict = f", {summary.did_not_learn}" if summary.did_not_learn else ""
    return f"seed {run.seed}: {summary.final.value:.4f}{verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="cnn-digits")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--results-dir", type=Path, default=Path("results/convergence"))
    parser.add_argument("--study", action="append", default=[], help="tabulate these instead")
    args = parser.parse_args()
    ids = args.study
    if not ids:
        start = time.monotonic()
        ids = [sweep(args.results_dir, args.benchmark, args.workers, args.runs, args.sets)]
        print(f"{time.monotonic() - start:.0f} s, load {os.getloadavg()[0]:.1f} at the end\n")
    for study_id in ids:
        print(table(args.results_dir, study_id) + "\n")


if __name__ == "__main__":
    main()
