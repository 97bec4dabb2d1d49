"""Fixed against adaptive batch size at the benchmarks' own batch: time to target over N runs of
each, by the MLPerf rule, and their ratio with a bootstrap interval.

Two tasks, each a study run through the runner's own API (runner.sweep, the local backend,
2 gloo workers), exactly as `runner sweep TASK --set policy=none,batch` runs one, except
that the runs alternate (fixed, adaptive, fixed, ...) instead of going cell by cell, so a
burst of other work on a shared machine lands on both arms alike. Run i of both arms has
seed i: the arms are paired run by run.

- cnn-digits: the benchmark as registered (scikit-learn's digits, 2 x 32 samples, LR 0.05
  per worker, one-epoch warm-up), target 95 %;
- resnet20-cifar10 on a CIFAR-format data set this script generates (bench/adaptive_data.py:
  2,500 training and 500 test images, no download), the benchmark's model, optimizer and LR
  (0.0125 per worker at 32 samples each, linear scaling), its warm-up shortened to one epoch
  so that it ends well before the target, target 70 % (the benchmark's light target), at
  most 16 epochs.

The three-arm study (the batch policy where it acts, the sync policy, an elastic run, with
their decisions checked per run) is bench/adaptive_study.py; this one is the batch policy
at the benchmarks' own settings, through sweeps.

The batch tasks' fixed arm is the benchmark (policy=none: no monitors); the adaptive arm adds
policy=batch with its defaults (workloads/adaptive/config.py: the global batch starts at the
fixed arm's, grows by powers of 2 up to 16x when the smoothed B_noise reaches twice it, the
LR following it linearly; monitors every 10 steps; the first change after 10 readings). Both
set compile_model=false (the batch policy refuses compilation, so the fixed arm does too).
Printed: every run's time to target, the MLPerf aggregate of each arm (runner.results.
aggregate), their ratio with a seeded percentile-bootstrap 95 % interval (runner.results.
aggregate.ratio_interval, as `runner report` gives it), the decisions taken and the final
global batch; with --figures,
bench/adaptive_figures.py's two figures. `--studies` reads finished studies back instead of
running new ones (the same table, JSON and figures). A measurement, not a test: it asserts
nothing.

Usage: python bench/adaptive_batch_study.py [--runs 5] [--tasks cnn-digits resnet20]
       [--results-dir results] [--json out.json] [--figures bench/figures]
       [--studies STUDY_ID ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.adaptive_data import SynthCifar, write  # noqa: E402
from runner import sweep  # noqa: E402
from runner.job.target import local_target  # noqa: E402
from runner.results import study as studies  # noqa: E402
from runner.results.aggregate import Aggregate, mlperf_aggregate, ratio_interval  # noqa: E402
from runner.results.runs import RunResult, load_run  # noqa: E402

WORKERS = 2
FIXED = "none"  # the fixed arm's policy=...; the adaptive arm's is its task's
ADAPTIVE = "adaptive"  # the key of the adaptive arm's rows, whatever its policy
SYNTH = SynthCifar(num_train=2500, num_test=500)
DATA_SUBDIR = "adaptive-study-data"


@dataclass(frozen=True)
class Task:
    name: str
    benchmark: str
    sets: tuple[str, ...]  # --set items both arms share
    needs_data: bool = False
    policy: str = "batch"  # the adaptive arm's policy=...


ARMS = {FIXED: "fixed", ADAPTIVE: "adaptive"}


def arm_of(planned: studies.PlannedRun) -> str:
    return FIXED if dict(planned.sets)["policy"] == FIXED else ADAPTIVE


TASKS = {
    "cnn-digits": Task("cnn-digits", "cnn-digits", ("compile_model=false",)),
    "resnet20": Task(
        "resnet20",
        "resnet20-cifar10",
        ("compile_model=false", "warmup_epochs=1", "max_epochs=16", "target_value=0.7"),
        needs_data=True,
    ),
}


def alternated(study: studies.Study) -> studies.Study:
    """The study's runs reordered fixed, adaptive, fixed, ... (run i of each arm in turn)."""
    order = {FIXED: 0, ADAPTIVE: 1}
    runs = sorted(study.runs, key=lambda r: (r.index, order[arm_of(r)]))
    return replace(study, runs=tuple(runs))


def run_task(task: Task, results_dir: Path, runs: int, data_dir: Path | None) -> studies.Study:
    sets = [*task.sets, f"policy={FIXED},{task.policy}"]
    if data_dir is not None:
        sets.append(f"data_dir={data_dir}")
    target = local_target(results_dir)
    study = alternated(sweep.new_study(task.benchmark, [WORKERS], sets, runs, target))
    print(f"{task.name}: study {study.study_id}, {len(study.runs)} runs", flush=True)

    def on_end(i: int, planned: studies.PlannedRun, outcome: Any) -> None:
        run = load_run(outcome.run.run_dir)
        print(f"  {i + 1:>2}/{len(study.runs)} {ARMS[arm_of(planned)]:<8} "
              f"seed {planned.seed}: {outcome.status.state.value:<9} {_time(run)}",
              flush=True)  # fmt: skip

    return sweep.run_study(results_dir, study, target, sweep.Callbacks(on_run_end=on_end))


def read_study(results_dir: Path, study_id: str) -> studies.Study:
    path = studies.find(results_dir, study_id)
    if path is None:
        raise SystemExit(f"no study {study_id} under {results_dir}; the ids are in its studies/")
    return studies.load(path)


def arm_runs(results_dir: Path, study: studies.Study) -> dict[str, list[RunResult]]:
    """Each arm's runs, by seed."""
    out: dict[str, list[RunResult]] = {FIXED: [], ADAPTIVE: []}
    for planned in sorted(study.runs, key=lambda r: r.seed):
        if planned.run_id is not None:
            out[arm_of(planned)].append(load_run(results_dir / planned.run_id))
    return out


def run_row(run: RunResult) -> dict[str, Any]:
    summary = run.train_summary
    adaptive = summary.adaptive if summary else None
    return {
        "run_id": run.run_id,
        "seed": run.seed,
        "state": run.state,
        "time_to_target_s": run.time_to_target_s,
        "epochs": summary.epochs if summary else None,
        "steps": summary.steps if summary else None,
        "decisions": adaptive.decisions if adaptive else 0,  # one per knob changed
        "batch_changes": int(adaptive.decisions_by_knob.get("global_batch", 0)) if adaptive
        else 0,
        "final_global_batch": int(adaptive.final.get("global_batch", 0)) if adaptive
        and "global_batch" in adaptive.final else (summary.global_batch_size if summary else None),
        "b_noise": adaptive.b_noise if adaptive else None,
    }  # fmt: skip


def table(task: str, rows: dict[str, list[dict[str, Any]]], aggs: dict[str, Aggregate]) -> str:
    lines = [f"{task}: time to target (s) by seed | MLPerf aggregate | epochs to target | "
             "batch changes | final global batch | decisions"]  # fmt: skip
    for policy, arm in ARMS.items():
        times = " ".join(f"{_num(r['time_to_target_s']):>7}" for r in rows[policy])
        agg = aggs[policy]
        shown = _num(agg.mean_s) if agg.valid else f"invalid ({agg.reason})"
        epochs = ",".join(str(r["epochs"]) for r in rows[policy])
        changes = ",".join(str(r["batch_changes"]) for r in rows[policy])
        finals = ",".join(str(r["final_global_batch"]) for r in rows[policy])
        decided = ",".join(str(r["decisions"]) for r in rows[policy])
        lines.append(
            f"  {arm:<9}{times} | {shown:>7} | {epochs} | {changes} | {finals} | {decided}"
        )
    fixed, adaptive = aggs[FIXED].mean_s, aggs[ADAPTIVE].mean_s
    if fixed and adaptive:
        lines.append(f"  adaptive / fixed: {adaptive / fixed:.2f} ({aggs[FIXED].rule})")
    lines.append("  " + ratio_line(rows[ADAPTIVE], rows[FIXED], "adaptive / fixed"))
    to_target = {p: epochs_aggregate(rows[p]).mean_s for p in ARMS}
    fixed_epochs, adaptive_epochs = to_target[FIXED], to_target[ADAPTIVE]
    if fixed_epochs and adaptive_epochs:
        lines.append(f"  epochs to target, same rule: fixed {fixed_epochs:.2f}, adaptive "
                     f"{adaptive_epochs:.2f}, ratio {adaptive_epochs / fixed_epochs:.2f} "
                     "(the algorithm's part, without the machine's speed)")  # fmt: skip
    return "\n".join(lines)


def ratio_line(a: list[dict[str, Any]], b: list[dict[str, Any]], what: str) -> str:
    """The report's ratio of mean times to target with its bootstrap interval, in a line."""
    r = ratio_interval([x["time_to_target_s"] for x in a], [x["time_to_target_s"] for x in b])
    if r.ratio is None:
        return f"{what}, all runs that reached the target: too few runs ({r.runs_a}, {r.runs_b})"
    return (f"{what}, all runs that reached the target: {r.ratio:.2f}, 95 % interval "
            f"{r.low:.2f}-{r.high:.2f}: {r.verdict} ({r.method})")  # fmt: skip


def epochs_aggregate(rows: list[dict[str, Any]]) -> Aggregate:
    """Epochs to target by the same MLPerf rule (a missed target is infinitely many): what
    the policy changed in the training itself, whatever the machine's load did to the time."""
    reached = [r["epochs"] if r["time_to_target_s"] is not None else None for r in rows]
    return mlperf_aggregate(reached)


def _num(value: float | None) -> str:
    return "miss" if value is None else f"{value:.2f}"


def _time(run: RunResult) -> str:
    t = run.time_to_target_s
    return f"time to target {t:.2f} s" if t is not None else "target missed"


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each arm (MLPerf: 5)")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--figures", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--studies",
        nargs="+",
        default=None,
        metavar="STUDY_ID",
        help="read these finished studies (one per task, in --tasks order)",
    )
    args = parser.parse_args()
    if args.studies is not None and len(args.studies) != len(args.tasks):
        parser.error(f"--studies needs one study id per task ({', '.join(args.tasks)})")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    results_dir = args.results_dir.resolve()
    started, load_start = time.perf_counter(), _load()
    report: dict[str, Any] = {"cores": os.cpu_count(), "tasks": {}}
    if args.studies is None:
        print(f"{os.cpu_count()} cores; load at start: {load_start}", flush=True)
        report["load_start"] = load_start
    for i, name in enumerate(args.tasks):
        task = TASKS[name]
        if args.studies is not None:
            study = read_study(results_dir, args.studies[i])
        else:
            data_dir = write(SYNTH, results_dir / DATA_SUBDIR).parent if task.needs_data else None
            study = run_task(task, results_dir, args.runs, data_dir)
        runs = arm_runs(results_dir, study)
        rows = {p: [run_row(r) for r in runs[p]] for p in ARMS}
        r = ratio_interval([x["time_to_target_s"] for x in rows[ADAPTIVE]],
                           [x["time_to_target_s"] for x in rows[FIXED]])  # fmt: skip
        aggs = {p: mlperf_aggregate([r["time_to_target_s"] for r in rows[p]]) for p in ARMS}
        print(table(name, rows, aggs), flush=True)
        report["tasks"][name] = {
            "study_id": study.study_id, "benchmark": task.benchmark,
            "sets": list(task.sets), "created_at": study.created_at,
            "finished_at": study.finished_at,
            "rows": rows,
            "aggregate": {p: {"mean_s": a.mean_s, "kept_s": list(a.kept_s), "rule": a.rule,
                              "reason": a.reason} for p, a in aggs.items()},
            "epochs_aggregate": {p: epochs_aggregate(rows[p]).mean_s for p in ARMS},
            "ratio": {"adaptive_over_fixed": r.ratio, "low": r.low, "high": r.high,
                      "verdict": r.verdict, "method": r.method},
        }  # fmt: skip
        if args.figures is not None:
            from bench.adaptive_figures import run_figure

            for path in run_figure(name, runs[ADAPTIVE], rows[ADAPTIVE], args.figures):
                print(f"wrote {path}")
    if args.studies is None:  # read back, the load and the time would be today's, not the study's
        report["load_end"] = _load()
        report["elapsed_s"] = time.perf_counter() - started
        print(f"study took {report['elapsed_s'] / 60:.1f} min; load at end: {report['load_end']}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.figures is not None:
        from bench.adaptive_figures import time_figure

        print(f"wrote {time_figure(report['tasks'], args.figures)}")


if __name__ == "__main__":
    main()
