"""The study and comparison pages' payloads, shaped from what runner.results computes.

A study page shows the report's own tables (runner.results.export.tables) and the numbers
behind its figures (speedup, time to accuracy per cell with each run, the step phases, the
curves), with each run's outlier flag (the report's rule) and whether the MLPerf mean
dropped it. A comparison lines up two or more runs' configurations key by key, marking the
keys that differ, with the report's own verdicts on what makes runs incomparable
(closed-division conflicts, environment differences). Pure: runs in, JSON-ready dicts out;
reading them is runner.dashboard.data's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from runner.errors import RunnerError
from runner.results import export
from runner.results import report as reports
from runner.results.aggregate import mean_phase_ms_per_step
from runner.results.runs import RunResult, config_conflicts, environment_differences
from runner.results.study import Study
from runner.words import count

# The summary figures a comparison lines up beside the runs table's: (label, the field of a
# training run's summary, unit the page formats it in).
SUMMARY_FIELDS = (
    ("epochs", "epochs", "count"),
    ("run time", "run_time_s", "s"),
    ("init time (outside the clock)", "init_time_s", "s"),
    ("throughput", "throughput_samples_per_s", "samples/s"),
    ("step time", "step_time_ms", "ms"),
    ("communication share", "communication_share", "share"),
)


def table(t: export.Table) -> dict[str, Any]:
    return {"title": t.title, "header": list(t.header), "rows": [list(r) for r in t.rows],
            "notes": list(t.notes)}  # fmt: skip


def study_page(
    study: Study, runs: Sequence[RunResult], problems: list[dict], group_by: str | None = None
) -> dict[str, Any]:
    """The study's report, its series by what the runs vary in or, with `group_by`, by that
    configuration key's value (as `runner report --group-by`); `keys`: every key a run has,
    for the page's choice."""
    keys = sorted({k for run in runs for k in run.keys})
    page: dict[str, Any] = {
        "study": {**study.to_dict(), "runs": [_planned(p) for p in study.runs]},
        "problems": problems, "report": None, "error": None, "keys": keys, "group_by": group_by,
    }  # fmt: skip
    if not runs:
        page["error"] = "no run of this study can be read yet"
        return page
    if group_by is not None and group_by not in keys:
        page["error"] = f"no run of this study has the configuration key {group_by!r}"
        return page
    try:
        built = reports.build(runs, study.study_id, allow_mixed=True, group_by=group_by)
        page["report"] = _report(built)
    except (RunnerError, KeyError, TypeError, ValueError) as err:
        # runner.results reads summaries without checking their shape: a damaged one lands here
        page["error"] = f"the report cannot be built from these runs: {err!r}"
    return page


def _planned(p: Any) -> dict[str, Any]:
    return {"workers": p.workers, "sets": [list(s) for s in p.sets], "index": p.index,
            "seed": p.seed, "run_id": p.run_id, "state": p.state}  # fmt: skip


def _report(built: reports.Report) -> dict[str, Any]:
    label = built.labeller()
    return {
        "title": built.title,
        "series": built.series,
        "group_by": built.group_by,
        "tables": [table(t) for t in export.tables(built)],
        "conflicts": list(built.conflicts),
        "cells": [_cell(c) for c in built.cells],
        "excluded": [r.run_id for r in built.excluded],
        "target": built.target,
        "curves": [
            {
                "run_id": r.run_id,
                "group": label(r),  # its series' label: runs of one series share a colour
                "label": f"{label(r)}, {count(r.world_size, 'worker')}",
                "series": {k: [list(p) for p in v] for k, v in r.curves.items()},
            }
            for r in built.runs
            if r.curves
        ],
    }


SLOW, FAST, MISSED = "slow outlier", "fast outlier", "missed the target"


def _flag(run: Any, cell: reports.Cell) -> str | None:
    """The report's outlier rule (runner.results.aggregate.outliers), as the page names it; a
    run that missed the target while another of its cell reached it is flagged too."""
    ratio = cell.outliers.get(run.run_id)
    if ratio is not None:
        return SLOW if ratio > 1 else FAST
    if run.time_to_target_s is None and cell.tta.num_converged:
        return MISSED
    return None


def _cell(c: reports.Cell) -> dict[str, Any]:
    times = [r.time_to_target_s for r in c.runs]
    flags = [_flag(r, c) for r in c.runs]
    dropped = _dropped(times, c.tta.dropped_s)
    return {
        "series": c.series, "workers": c.workers, "valid": c.tta.valid, "reason": c.tta.reason,
        "rule": c.tta.rule, "mean_s": c.tta.mean_s, "std_s": c.tta.std_s,
        "min_s": c.tta.min_s, "max_s": c.tta.max_s, "num_runs": c.tta.num_runs,
        "num_converged": c.tta.num_converged, "speedup": c.speedup, "efficiency": c.efficiency,
        "phase_ms": dict(c.phase_ms),
        "runs": [
            {"run_id": r.run_id, "seed": r.seed, "state": r.state, "time_to_target_s": t,
             "flag": flag, "dropped": drop}
            for r, t, flag, drop in zip(c.runs, times, flags, dropped, strict=True)
        ],
    }  # fmt: skip


def _dropped(times: Sequence[float | None], dropped_s: Sequence[float]) -> list[bool]:
    """Which runs the MLPerf mean left out, matched by time (a miss counts as infinite)."""
    left = list(dropped_s)
    out = []
    for t in times:
        value = float("inf") if t is None else t
        out.append(value in left)
        if value in left:
            left.remove(value)
    return out


def comparison(rows: Sequence[Mapping[str, Any]], runs: Sequence[RunResult]) -> dict[str, Any]:
    """Rows (runs table) of the runs compared, their configurations key by key, and the
    report's verdicts; `runs` are those runner.results could read (a damaged run has a row)."""
    by_id = {r.run_id: r for r in runs}
    configs = [_config(by_id.get(row["run_id"])) for row in rows]
    keys = sorted({k for c in configs for k in c})
    config = []
    for key in keys:
        values = [c.get(key) for c in configs]
        texts = {json.dumps(v, sort_keys=True) for v, c in zip(values, configs, strict=True) if c}
        config.append({"key": key, "values": values, "differs": len(texts) > 1})
    summary = [
        {"label": label, "unit": unit,
         "values": [_field(by_id.get(row["run_id"]), name) for row in rows]}
        for label, name, unit in SUMMARY_FIELDS
    ]  # fmt: skip
    phases = [_phase_ms(by_id.get(row["run_id"])) for row in rows]
    try:
        conflicts, environment = config_conflicts(runs), environment_differences(runs)
    except RunnerError as err:  # an unknown benchmark (records are checked when read)
        conflicts, environment = [f"cannot compare these runs' records: {err}"], {}
    return {
        "runs": list(rows), "config": config, "summary": summary, "phase_ms": phases,
        "conflicts": conflicts, "environment": environment,
    }  # fmt: skip


def _phase_ms(run: RunResult | None) -> dict[str, float]:
    """A run's mean time per step by phase (ms), as the report computes it for a cell."""
    summary = run.train_summary if run else None
    if summary is None:
        return {}
    return mean_phase_ms_per_step([(summary.phases_s, summary.steps)])


def _config(run: RunResult | None) -> dict[str, Any]:
    if run is None:
        return {}
    where = {"benchmark": run.benchmark, "division": run.division, "workers": run.world_size,
             "nodes": run.num_nodes, "device": run.device, "backend": run.backend}  # fmt: skip
    return {**{f"run: {k}": v for k, v in where.items()}, **run.config}


def _field(run: RunResult | None, name: str) -> Any:
    summary = run.train_summary if run else None
    return getattr(summary, name) if summary else None
