"""An elastic run with a worker leaving and joining, beside its fixed arm: time to target over
N runs of each, and elastic / fixed with the report's bootstrap interval.

cnn-digits on the local backend (gloo, strategy=allreduce: elastic runs need a strategy not
built on DDP), 8 samples a worker at LR 0.025 (so that an epoch has enough steps for a worker
to leave and join inside the run before its target, 96 % here), alternating runs of the two
arms, run i of both with seed i:

- fixed: 3 workers throughout (--workers 3);
- elastic: --workers 2:3; worker w2 is killed (SIGKILL, a real fault) a third into epoch 2
  (never at an epoch's edge, where docs/adaptive-elastic.md says the run fails by design);
  once the survivors recorded its departure (`workers 3 -> 2`), `runner join` adds one
  worker, admitted at the next decision point (`workers 2 -> 3`).

Heartbeats every 0.2 s and a worker gone after 2 s (as tests/runner/test_elastic_runs.py),
so the survivors go on 2 s after the kill: that pause is part of what elasticity costs.
Printed: every run's time to target and, for elastic runs, when the worker left and joined
against when the target was met (a run that met its target before the join measured the
departure only); the MLPerf aggregate of each arm; the ratio and its interval. A
measurement, not a test: it asserts nothing.

Usage: python bench/adaptive_elastic_study.py [--runs 5] [--results-dir results]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contract.events import DECISION, EPOCH_START, EPOCH_STOP, read_events  # noqa: E402
from contract.rundir import EVENTS  # noqa: E402
from runner import api  # noqa: E402
from runner.backends.local import processes  # noqa: E402
from runner.backends.local.backend import LocalBackend  # noqa: E402
from runner.job.spec import Placement, resolve  # noqa: E402
from runner.results.aggregate import mlperf_aggregate, ratio_interval  # noqa: E402
from runner.results.runs import load_run  # noqa: E402

# A target of 96 %, past the benchmark's 95 %: at 95 % a run met it about as soon as the leaver
# was gone, before the joiner (a new process importing torch) was admitted; 97 % was missed
# in 20 epochs by a fixed run of this setting.
SETS = ["strategy=allreduce", "compile_model=false", "batch_size=8", "lr=0.025",
        "heartbeat_s=0.2", "dead_after_s=2", "max_epochs=30", "target_value=0.96"]  # fmt: skip
WORKERS = 3
LEAVER = "w2"
WAIT_S = 300


def submit(results: Path, seed: int, elastic: bool) -> api.Run:
    placement = Placement(procs_per_node=WORKERS, min_workers=WORKERS - 1 if elastic else None)
    spec = resolve("cnn-digits", [*SETS, f"seed={seed}"], placement)
    return api.submit(spec, LocalBackend(results), results, detach=True)


def _events(run: api.Run) -> list[dict[str, Any]]:
    return read_events(run.run_dir / EVENTS)


def _event(run: api.Run, key: str, epoch: int) -> dict[str, Any] | None:
    for event in _events(run):
        if event["key"] == key and event["metadata"].get("epoch_num") == epoch:
            return event
    return None


def _until(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def _member(run: api.Run, member: str) -> psutil.Process:
    for proc in processes.members(run.run_dir.name, run.run_dir):
        try:
            if proc.environ().get("STACKBENCH_MEMBER") == member and "workloads.train" in (
                proc.cmdline()
            ):
                return proc
        except psutil.Error:
            continue
    raise SystemExit(f"no live process of worker {member} in {run.run_id}")


def leave_and_join(results: Path, run: api.Run) -> None:
    """Kills LEAVER a third into epoch 2, then asks for a worker once it is recorded gone."""
    _until(lambda: _event(run, EPOCH_START, 2), "epoch 2")
    began, ended = _event(run, EPOCH_START, 1), _event(run, EPOCH_STOP, 1)
    assert began is not None and ended is not None
    time.sleep((ended["time_ms"] - began["time_ms"]) / 1000 / 3)
    os.kill(_member(run, LEAVER).pid, signal.SIGKILL)
    _until(lambda: _changes(run), "the departure to be recorded")
    api.join(results, run)


def _changes(run: api.Run) -> list[dict[str, Any]]:
    """The run's membership decisions: {t_s, old, new}, seconds since run_start."""
    events = _events(run)
    start = next((e["time_ms"] for e in events if e["key"] == "run_start"), None)
    return [
        {"t_s": (e["time_ms"] - start) / 1000, "old": e["value"].get("old"),
         "new": e["value"].get("new")}
        for e in events
        if start is not None and e["key"] == DECISION and e["value"].get("knob") == "workers"
    ]  # fmt: skip


def one_run(results: Path, seed: int, elastic: bool) -> dict[str, Any]:
    run = submit(results, seed, elastic)
    if elastic:
        leave_and_join(results, run)
    status = api.wait(results, run)
    result = load_run(run.run_dir)
    changed = _changes(run)
    row: dict[str, Any] = {
        "run_id": run.run_id,
        "seed": seed,
        "arm": "elastic" if elastic else "fixed",
        "state": status.state.value,
        "time_to_target_s": result.time_to_target_s,
        "workers": changed,
    }
    changes = " ".join(f"{c['old']}->{c['new']} at {c['t_s']:.1f} s" for c in changed)
    tta = row["time_to_target_s"]
    print(f"  seed {seed} {row['arm']:<8} {row['state']:<9} "
          f"{'miss' if tta is None else f'{tta:.2f} s':>9} {changes}", flush=True)  # fmt: skip
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each arm (MLPerf: 5)")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    results = args.results_dir.resolve()
    results.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for seed in range(args.runs):  # alternating: a burst of other work lands on both arms
        rows += [one_run(results, seed, elastic=False), one_run(results, seed, elastic=True)]
    times = {arm: [r["time_to_target_s"] for r in rows if r["arm"] == arm]
             for arm in ("fixed", "elastic")}  # fmt: skip
    for arm, arm_times in times.items():
        agg = mlperf_aggregate(arm_times)
        shown = f"{agg.mean_s:.2f} s" if agg.mean_s is not None else f"invalid ({agg.reason})"
        print(f"{arm}: {shown} ({agg.rule})")
    ratio = ratio_interval(times["elastic"], times["fixed"])
    if ratio.ratio is None:
        print(f"elastic / fixed: too few runs reached the target ({ratio.runs_a}, {ratio.runs_b})")
    else:
        print(f"elastic / fixed: {ratio.ratio:.2f}, 95 % interval {ratio.low:.2f}-"
              f"{ratio.high:.2f}: {ratio.verdict} ({ratio.method})")  # fmt: skip
    if args.json is not None:
        ratio_fields = {"ratio": ratio.ratio, "low": ratio.low, "high": ratio.high,
                        "verdict": ratio.verdict, "method": ratio.method}  # fmt: skip
        args.json.write_text(json.dumps({"rows": rows, "ratio": ratio_fields}, indent=1) + "\n")


if __name__ == "__main__":
    main()
