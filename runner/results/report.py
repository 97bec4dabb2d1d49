"""A report over runs: which runs (collect), their cells and per-cell statistics (build), and
what cluster runs cost.

`build` groups runs into cells (series x workers; a series is what the runs' --set values vary
apart from run controls, such as the strategy), aggregates time to accuracy by the MLPerf rule
(runner.results.aggregate), computes speedups per series, and refuses runs whose closed-division
configurations differ unless `allow_mixed`. How runs are named into series is
runner.results.series; how a built report reads (tables, notes, figures, Markdown, HTML) is
runner.results.export. Never prints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from contract.files import DamagedFile
from contract.rundir import JobState
from runner.errors import RunInputError, RunnerError
from runner.job.benchmarks import RUN_CONTROLS
from runner.job.spec import ADAPTIVE_KEYS
from runner.results import rundir
from runner.results import study as studies
from runner.results.aggregate import (
    Aggregate,
    Ratio,
    mean_phase_ms_per_step,
    mlperf_aggregate,
    outliers,
    ratio_interval,
    speedups,
)
from runner.results.runs import (
    SWITCHED_STRATEGIES,
    RunResult,
    config_conflicts,
    environment_differences,
    load_run,
)
from runner.results.series import series_labeller, series_order
from runner.stack import cost as costs
from runner.stack.cost import Cost

# Runs that cannot count: stopped by a person, or not over yet (failed runs count as misses).
EXCLUDED_STATES = ("CANCELLED", "RUNNING", "PENDING", "UNKNOWN")
FINAL_STATES = tuple(s.value for s in JobState if s.finished)
NOT_OVER = (JobState.PENDING.value, JobState.RUNNING.value)
REPORTS_DIR = "reports"  # results/reports/<name>/: reports of anything but one study


class MixedConfigurations(RunInputError):
    """Runs with different closed-division configurations were asked to stand side by side:
    bad input (exit 2), since the fix is in the command line (report them apart, or
    --allow-mixed)."""


@dataclass(frozen=True)
class Cell:
    series: str
    workers: int
    runs: tuple[RunResult, ...]
    tta: Aggregate
    phase_ms: Mapping[str, float]
    speedup: float | None = None
    efficiency: float | None = None
    baseline_workers: int | None = None  # the series' cell every speedup is against
    # Run id -> its time to target over the cell's median, for runs far from it.
    outliers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ArmRatio:
    """An adaptive series against its fixed arm at one number of workers: two cells whose
    runs differ only by their policies (or an elastic range)."""

    workers: int
    adaptive: str  # the series labels
    fixed: str
    ratio: Ratio  # adaptive / fixed time to target


@dataclass(frozen=True)
class Report:
    title: str
    runs: tuple[RunResult, ...]
    cells: tuple[Cell, ...]
    excluded: tuple[RunResult, ...]
    conflicts: tuple[str, ...]
    env_diffs: Mapping[str, list[str]]
    costs: Mapping[str, Cost] = field(default_factory=dict)  # by run id; cluster runs only
    arms: tuple[ArmRatio, ...] = ()  # adaptive against fixed, where two series differ so
    group_by: str | None = None  # the configuration key series are by (--group-by); None: all

    def labeller(self) -> Callable[[RunResult], str]:
        """Each run's series label, as the cells were built."""
        return series_labeller(self.runs, self.group_by)

    @property
    def series(self) -> list[str]:
        return list(dict.fromkeys(c.series for c in self.cells))

    @property
    def target(self) -> float | None:
        for run in self.runs:
            if run.train_summary:
                return run.train_summary.target_value
        return None


def build(
    runs: Sequence[RunResult],
    title: str,
    allow_mixed: bool = False,
    costs: Mapping[str, Cost] | None = None,
    group_by: str | None = None,
) -> Report:
    """The report of `runs`: one series per configuration they vary in, or with `group_by` (a
    configuration key as the dashboard's table reads it, runner.results.keys) one per value
    of that key."""
    if not runs:
        raise RunnerError("nothing to report: no runs given; list them with `runner runs`")
    if group_by is not None:
        _check_key(runs, group_by)
    conflicts = tuple(config_conflicts(runs))
    if conflicts and not allow_mixed:
        lines = (
            "these runs have different closed-division configurations, so their times are not "
            "comparable:",
            *(f"  {conflict}" for conflict in conflicts),
            "report them apart, or pass --allow-mixed to put them side by side anyway",
        )
        mixed = MixedConfigurations("\n".join(lines))
        mixed.lines = lines
        raise mixed
    counted = [r for r in runs if r.state not in EXCLUDED_STATES]
    excluded = tuple(r for r in runs if r.state in EXCLUDED_STATES)
    label = series_labeller(runs, group_by)
    groups: dict[tuple[str, int], list[RunResult]] = {}
    for run in counted:
        groups.setdefault((label(run), run.world_size), []).append(run)
    cells = [_cell(series, workers, members) for (series, workers), members in groups.items()]
    cells.sort(key=lambda c: (*series_order(c.runs[0]), c.series, c.workers))
    cells = _with_speedups(cells)
    envs = environment_differences(runs)
    return Report(title, tuple(runs), tuple(cells), excluded, conflicts, envs, dict(costs or {}),
                  arms=tuple(arm_ratios(cells)), group_by=group_by)  # fmt: skip


def _check_key(runs: Sequence[RunResult], key: str) -> None:
    """A key none of the runs has is a typo, not one series of "-": bad input, naming them."""
    known = sorted({k for run in runs for k in run.keys})
    if key not in known:
        raise RunInputError(f"--group-by {key}: no run has that configuration key; "
                            f"they have {', '.join(known)}")  # fmt: skip


# What adapts: the policies a run follows with their settings (runner.job.spec.ADAPTIVE_KEYS,
# the keys runner.results.runs lets differ without --allow-mixed) and an elastic range. Two
# cells whose runs differ in these alone are an adaptive arm and its fixed one; the seed and
# run controls aside.


def adapts(run: RunResult) -> bool:
    return bool(run.config.get("policy")) or run.min_workers is not None


def _arm_config(run: RunResult) -> str:
    """What must be equal between an adaptive arm and its fixed one."""
    kept = {k: v for k, v in run.config.items()
            if k not in RUN_CONTROLS and k not in ADAPTIVE_KEYS}  # fmt: skip
    strategy = kept.get("strategy")
    kept["strategy"] = SWITCHED_STRATEGIES.get(str(strategy), strategy)
    where = (run.benchmark, run.device, run.link, run.world_size)
    return json.dumps([where, kept], sort_keys=True, default=str)


def arm_ratios(cells: Sequence[Cell]) -> list[ArmRatio]:
    """adaptive / fixed time to target wherever an adaptive cell has a fixed twin."""
    fixed: dict[str, Cell] = {}
    for c in cells:
        if not any(adapts(r) for r in c.runs):
            fixed.setdefault(_arm_config(c.runs[0]), c)
    out = []
    for c in cells:
        if not all(adapts(r) for r in c.runs):
            continue
        twin = fixed.get(_arm_config(c.runs[0]))
        if twin is not None:
            ratio = ratio_interval([r.time_to_target_s for r in c.runs],
                                   [r.time_to_target_s for r in twin.runs])  # fmt: skip
            out.append(ArmRatio(c.workers, c.series, twin.series, ratio))
    return out


def _cell(series: str, workers: int, runs: list[RunResult]) -> Cell:
    runs.sort(key=lambda r: r.created_at)
    tta = mlperf_aggregate([r.time_to_target_s for r in runs])
    phases = mean_phase_ms_per_step(
        [(r.train_summary.phases_s, r.train_summary.steps) for r in runs if r.train_summary]
    )
    flagged = outliers({r.run_id: r.time_to_target_s for r in runs})
    return Cell(series, workers, tuple(runs), tta, phases, outliers=flagged)


def _with_speedups(cells: list[Cell]) -> list[Cell]:
    out = []
    for series in dict.fromkeys(c.series for c in cells):
        members = [c for c in cells if c.series == series]
        by_workers = {s.workers: s for s in speedups({c.workers: c.tta.mean_s for c in members})}
        for c in members:
            s = by_workers[c.workers]
            out.append(replace(c, speedup=s.speedup, efficiency=s.efficiency,
                               baseline_workers=s.base_workers))  # fmt: skip
    return out


def collect(results_root: Path, ids: Sequence[str]) -> tuple[list[RunResult], str, list[str]]:
    """The runs named by run ids, study ids or prefixes of either, a title, and the runs left
    out because their directories are damaged (each with the file and the problem)."""
    runs: dict[str, RunResult] = {}
    names = []
    damaged: list[str] = []
    for ident in ids:
        study_file = studies.find(results_root, ident)
        if study_file is not None:
            study = studies.load(study_file)
            names.append(
                study.study_id + ("" if study.state == "complete" else f" ({study.state})")
            )
            dirs = _study_run_dirs(results_root, study.run_ids, damaged)
        else:
            dirs = [rundir.find(results_root, ident)]
            names.append(dirs[0].name)
        for run_dir in dirs:
            try:
                run = load_run(run_dir)
            except DamagedFile as err:
                damaged.append(f"{run_dir.name}: {err.path.name} {err.problem}")
                continue
            if run.run_id != run_dir.name:  # a copy: the run it names is counted once, there
                damaged.append(f"{run_dir.name}: job.json names run {run.run_id!r}, not its "
                               "directory (a copy)")  # fmt: skip
                continue
            runs.setdefault(run.run_id, run)
    title = (
        names[0]
        if len(names) == 1
        else f"{len(runs)} runs of {', '.join(sorted({r.benchmark for r in runs.values()}))}"
    )
    return list(runs.values()), title, damaged


def default_folder(results_root: Path, ids: Sequence[str]) -> Path:
    """Where a report goes without --out: one study's own report/ folder; else
    results/reports/<name>/, named by the one run, or for several studies and runs by the
    first (sorted), how many more, and a short hash of them all. Two different sets never
    share a folder (one report would replace the other's); the same set, in any order or by
    any prefixes, always gets the same one."""
    named = {_named(results_root, ident) for ident in ids}
    names = sorted(name for name, _ in named)
    if len(named) == 1:
        [(name, study_file)] = named
        return study_file.parent / "report" if study_file else results_root / REPORTS_DIR / name
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:8]
    return results_root / REPORTS_DIR / f"{names[0]}+{len(names) - 1}-{digest}"


def _named(results_root: Path, ident: str) -> tuple[str, Path | None]:
    """The study or run an id or prefix names, as collect reads it: the study's id and its
    study.json, or the run's id and None."""
    study_file = studies.find(results_root, ident)
    if study_file is not None:
        return study_file.parent.name, study_file
    return rundir.find(results_root, ident).name, None


def _study_run_dirs(results_root: Path, run_ids: Sequence[str], damaged: list[str]) -> list[Path]:
    """The run directories a study names that exist (a run not started yet has none). A study
    record may be hostile: an id that is not a plain name (`../elsewhere`, an absolute path)
    or names a link is never followed out of the results directory; it is named as damaged."""
    dirs = []
    for run_id in run_ids:
        run_dir = rundir.named(results_root, run_id)
        if run_dir is not None:
            dirs.append(run_dir)
        elif not rundir.plain_name(run_id) or (results_root / run_id).is_symlink():
            damaged.append(f"{run_id!r}: not a run directory of {results_root}, never followed")
    return dirs


def cluster_costs(runs: Sequence[RunResult], project_dir: Path | None) -> dict[str, Cost]:
    """Cost of each run on a Pulumi stack, from the stack file's shape and the price table."""
    table = costs.load_price_table()
    shapes: dict[str, costs.StackShape | str] = {}
    out = {}
    for run in runs:
        if run.stack is None:
            continue
        if run.stack not in shapes:
            try:
                if project_dir is None:
                    raise RunnerError("no Pulumi.yaml above this directory")
                shapes[run.stack] = costs.load_shape(run.stack, project_dir)
            except RunnerError as err:
                shapes[run.stack] = f"stack shape unknown: {err}"
        shape = shapes[run.stack]
        if isinstance(shape, str):
            out[run.run_id] = Cost(None, 0.0, shape)
            continue
        if run.state in NOT_OVER:  # no end, no summary: its cost so far is unknown, not $0
            out[run.run_id] = Cost(None, 0.0, f"{run.state}: known once it ends")
            continue
        out[run.run_id] = costs.run_cost(
            costs.stack_prices(table, shape), shape, run.num_nodes, run_duration_s(run)
        )
    return out


def run_duration_s(run: RunResult) -> float:
    """How long the run held its nodes (see runner.stack.cost.run_duration_s)."""
    s = run.train_summary
    fallback = s.init_time_s + s.run_time_s if s else 0.0
    finished = run.state_since if run.state in FINAL_STATES else None
    return costs.run_duration_s(run.created_at, finished, fallback)
