"""A report over runs: per-cell statistics, tables as plain rows, figures, Markdown and HTML.

`build` groups runs into cells (series x workers; a series is what the runs' --set values vary
apart from run controls, such as the strategy), aggregates time to accuracy by the MLPerf rule
(runner.results.aggregate), computes speedups per series, and refuses runs whose closed-division
configurations differ unless `allow_mixed`. Tables are (title, header, rows) of strings, so the
CLI shows them with rich and the exports write them as Markdown or HTML. Never prints.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from contract.files import DamagedFile
from contract.rundir import JobState
from runner.errors import RunnerError
from runner.job.benchmarks import RUN_CONTROLS
from runner.results import figures, rundir
from runner.results import study as studies
from runner.results.aggregate import (
    OUTLIER_RATIO,
    Aggregate,
    mean_phase_ms_per_step,
    mlperf_aggregate,
    outliers,
    speedups,
)
from runner.results.runs import (
    ADAPTIVE_CURVES,
    RunResult,
    config_conflicts,
    environment_differences,
    environment_values,
    load_run,
)
from runner.stack import cost as costs
from runner.stack.cost import Cost

# Runs that cannot count: stopped by a person, or not over yet (failed runs count as misses).
EXCLUDED_STATES = ("CANCELLED", "RUNNING", "PENDING", "UNKNOWN")
FINAL_STATES = tuple(s.value for s in JobState if s.finished)
NOT_OVER = (JobState.PENDING.value, JobState.RUNNING.value)


class MixedConfigurations(RunnerError):
    """Runs with different closed-division configurations were asked to stand side by side."""


@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


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
class Report:
    title: str
    runs: tuple[RunResult, ...]
    cells: tuple[Cell, ...]
    excluded: tuple[RunResult, ...]
    conflicts: tuple[str, ...]
    env_diffs: Mapping[str, list[str]]
    costs: Mapping[str, Cost] = field(default_factory=dict)  # by run id; cluster runs only

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
) -> Report:
    if not runs:
        raise RunnerError("nothing to report: no runs given; list them with `runner runs`")
    conflicts = tuple(config_conflicts(runs))
    if conflicts and not allow_mixed:
        raise MixedConfigurations(
            "these runs have different closed-division configurations, so their times are not "
            "comparable:\n  " + "\n  ".join(conflicts) + "\nreport them apart, or pass "
            "--allow-mixed to put them side by side anyway"
        )
    counted = [r for r in runs if r.state not in EXCLUDED_STATES]
    excluded = tuple(r for r in runs if r.state in EXCLUDED_STATES)
    label = series_labeller(runs)
    groups: dict[tuple[str, int], list[RunResult]] = {}
    for run in counted:
        groups.setdefault((label(run), run.world_size), []).append(run)
    cells = [_cell(series, workers, members) for (series, workers), members in groups.items()]
    cells = _with_speedups(sorted(cells, key=lambda c: (c.series, c.workers)))
    envs = environment_differences(runs)
    return Report(title, tuple(runs), tuple(cells), excluded, conflicts, envs, dict(costs or {}))


def series_labeller(runs: Sequence[RunResult]) -> Callable[[RunResult], str]:
    """Label runs by the --set values (and benchmark, device and link) that vary among them,
    run controls aside; when nothing varies, by strategy. Runs are told apart by the value
    they used, not the text they were given: `lr=.05` and the default 0.05 are one series,
    shown as the first --set text given for it."""
    keys = {key for run in runs for key in set(run.overrides) - RUN_CONTROLS}
    shown: dict[str, dict[str, str]] = {}  # key -> the value used -> its text in labels
    for key in keys:
        texts = shown.setdefault(key, {})
        for run in sorted(runs, key=lambda r: key not in r.overrides):  # --set texts first
            texts.setdefault(_used(run, key), str(run.overrides.get(key, run.config.get(key))))
    varying = sorted(k for k, texts in shown.items() if len(texts) > 1)
    several_benchmarks = len({r.benchmark for r in runs}) > 1
    several_devices = len({r.device for r in runs}) > 1  # a CPU and a GPU time never averaged
    several_links = len({r.link for r in runs}) > 1

    def label(run: RunResult) -> str:
        parts = [run.benchmark] if several_benchmarks else []
        parts += [f"device={run.device}"] if several_devices else []
        parts += [f"link={run.link or 'machine'}"] if several_links else []
        parts += [f"{k}={shown[k][_used(run, k)]}" for k in varying]
        return ", ".join(parts) or f"strategy={run.strategy}"

    return label


def _used(run: RunResult, key: str) -> str:
    """The value a run used for a --set key, as comparable text (the --set text itself for a
    key outside its config)."""
    if key not in run.config:
        return f"given {run.overrides.get(key)}"
    return json.dumps(run.config[key], sort_keys=True, default=str)


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


# ---- tables ------------------------------------------------------------------------------


def _num(value: float | None, fmt: str, missing: str = "-") -> str:
    return missing if value is None else format(value, fmt)


def cells_table(report: Report) -> Table:
    header = ("series", "workers", "converged", "time to accuracy (s)", "range (s)",
              "speedup", "compute + comm (ms/step)", "comm")  # fmt: skip
    rows, notes = [], []
    for c in report.cells:
        comm = c.phase_ms.get("communication", 0.0)
        compute = sum(v for k, v in c.phase_ms.items() if k != "communication")
        total = comm + compute
        tta = _num(c.tta.mean_s, ".2f", "not converged")
        if c.tta.valid and c.tta.std_s is not None:
            tta += f" ± {c.tta.std_s:.2f}"
        if not c.tta.valid:
            notes.append(f"{c.series}, {c.workers} workers: {c.tta.reason}")
        # Spread of the runs averaged: a cell without a result averaged none.
        span = f"{c.tta.min_s:.2f}-{c.tta.max_s:.2f}" if c.tta.valid else "-"
        speedup = "-" if c.speedup is None else f"{c.speedup:.2f}x ({c.efficiency:.0%})"
        rows.append((
            c.series, str(c.workers), f"{c.tta.num_converged}/{c.tta.num_runs}", tta, span,
            speedup, f"{compute:.2f} + {comm:.2f}", f"{comm / total:.0%}" if total else "-",
        ))  # fmt: skip
    notes = aggregation_notes(report) + notes
    notes.append(
        "± is the sample standard deviation of the runs averaged; range (s) and the figure's "
        "error bars are their fastest to slowest"
    )
    notes.append(
        "speedup: time to accuracy at the fewest workers with a result / at this many "
        "(efficiency: speedup / the workers' ratio)"
    )
    notes += baseline_notes(report) + outlier_notes(report)
    return Table("Time to accuracy per cell", header, tuple(rows), tuple(notes))


def aggregation_notes(report: Report) -> list[str]:
    """The rule each cell's mean follows, each line naming its cells: cells with different
    numbers of runs follow different rules, and an unlabelled line would not say whose."""
    cells_by_rule: dict[str, list[str]] = {}
    for c in report.cells:
        cells_by_rule.setdefault(c.tta.rule, []).append(f"{c.series} at {c.workers} workers")
    if len(cells_by_rule) == 1:
        return [f"aggregation (every cell): {rule}" for rule in cells_by_rule]
    return [f"aggregation ({'; '.join(cells)}): {rule}" for rule, cells in cells_by_rule.items()]


def baseline_notes(report: Report) -> list[str]:
    """A series whose fewest workers have no valid time has its speedups against a larger
    cell: said, or "1.00x" at 2 workers would read as no gain over one."""
    notes = []
    for series in report.series:
        cells = [c for c in report.cells if c.series == series]
        fewest = min(c.workers for c in cells)
        base = next((c.baseline_workers for c in cells if c.baseline_workers), None)
        if base is not None and base != fewest:
            notes.append(
                f"{series}: speedups are against {base} workers, the fewest with a valid time "
                f"({fewest} workers have none)"
            )
    return notes


def outlier_notes(report: Report) -> list[str]:
    """Runs far from their cell's median, and speedups they may have bent."""
    notes = []
    for c in report.cells:
        for run_id, ratio in c.outliers.items():
            notes.append(
                f"OUTLIER {run_id} ({c.series}, {c.workers} workers): time to accuracy "
                f"{ratio:.2f}x its cell's median; the cell's mean and every speedup against "
                "it lean on it"
            )
    for c in report.cells:
        if c.speedup is None or c.baseline_workers is None:
            continue
        scale = c.workers / c.baseline_workers  # against the cell the speedup is of
        if scale > 1 and c.speedup > scale * OUTLIER_RATIO:
            notes.append(
                f"SUSPECT speedup {c.speedup:.2f}x for {scale:g}x the workers ({c.series}): "
                "far beyond linear; look for an outlier or too few runs in either cell"
            )
    return notes


def runs_table(report: Report) -> Table:
    label = series_labeller(report.runs)
    header = ("run", "series", "workers", "seed", "state", "time to accuracy (s)", "final",
              "comm", "cost")  # fmt: skip
    rows = []
    for r in report.runs:
        s = r.train_summary
        final = s.final.value if s and s.final else None
        tta = _num(r.time_to_target_s, ".2f") if r.converged else "NOT CONVERGED"
        if s and s.diverged:
            tta = "DIVERGED"
        elif r.state in EXCLUDED_STATES:  # not over, or stopped by a person: in no statistic
            tta = f"{r.state}: left out"
        elif s and s.target_reached and not r.converged:  # its summary's time does not count
            tta = f"{r.state}: counted as a miss"
        if any(r.run_id in c.outliers for c in report.cells):
            tta += " OUTLIER"
        share = s.communication_share if s else None
        rows.append((
            r.run_id, label(r), str(r.world_size), str(r.seed), r.state,
            tta if s else "no summary", _num(final, ".4f"), _num(share, ".0%"),
            cost_text(report.costs.get(r.run_id), r),
        ))  # fmt: skip
    notes = [f"{r.run_id} is {r.state}: left out of the statistics" for r in report.excluded]
    return Table("Runs", header, tuple(rows), tuple(notes))


def cost_text(cost: Cost | None, run: RunResult) -> str:
    if cost is None:
        return "local" if run.backend == "local" else "unknown price"
    if cost.usd is None:
        return f"unknown price ({cost.reason})"
    return f"${cost.usd:.4f} ({cost.node_hours:.3f} node-h)"


def environment_table(report: Report) -> Table:
    """The manifests: what was the same for every run, and what was not."""
    rows = []
    first = environment_values(next((r.manifest for r in report.runs if r.manifest), None))
    for key, value in first.items():
        values = report.env_diffs.get(key) or [str(value)]
        rows.append((key, ", ".join(values), "DIFFERS" if key in report.env_diffs else "same"))
    divisions = sorted({r.division for r in report.runs})
    rows.append(("division", ", ".join(divisions), "DIFFERS" if len(divisions) > 1 else "same"))
    seeds = sorted({str(r.seed) for r in report.runs})
    rows.append(("seeds", ", ".join(seeds), "per run"))
    notes = [f"configurations differ (--allow-mixed): {c}" for c in report.conflicts]
    missing = [r.run_id for r in report.runs if not r.manifest]
    if missing:
        notes.append(f"no manifest.json: {', '.join(missing)} (fetch them: `runner fetch RUN`)")
    return Table("Reproducibility", ("what", "value", "across runs"), tuple(rows), tuple(notes))


def tables(report: Report) -> list[Table]:
    return [cells_table(report), runs_table(report), environment_table(report)]


# ---- figures and exports -----------------------------------------------------------------


def write_figures(report: Report, out_dir: Path) -> list[Path]:
    """speedup, time_to_accuracy, compute_communication and curves, each as PNG and SVG;
    adaptive (batch size, B_noise, workers and LR beside loss and quality) when a run has
    monitor or decision events."""
    by_series: dict[str, list[Cell]] = {s: [] for s in report.series}
    for c in report.cells:
        by_series[c.series].append(c)
    paths = figures.speedup_figure(
        {s: [(c.workers, c.speedup) for c in cs] for s, cs in by_series.items()},
        {s: next((c.baseline_workers for c in cs if c.baseline_workers), None)
         for s, cs in by_series.items()},
        f"{report.title}: speedup of time to accuracy", out_dir / "speedup",
    )  # fmt: skip
    paths += figures.time_to_accuracy_figure(
        {s: [(c.workers, c.tta) for c in cs] for s, cs in by_series.items()},
        f"{report.title}: time to accuracy", out_dir / "time_to_accuracy",
    )  # fmt: skip
    paths += figures.phases_figure(
        {s: [(c.workers, c.phase_ms) for c in cs if c.phase_ms] for s, cs in by_series.items()},
        f"{report.title}: compute and communication per step", out_dir / "compute_communication",
    )  # fmt: skip
    label = series_labeller(report.runs)
    curves = [(f"{label(r)}, {r.world_size} workers", r.curves) for r in report.runs if r.curves]
    paths += figures.curves_figure(
        curves, report.target, f"{report.title}: loss and accuracy", out_dir / "curves"
    )
    adaptive = [(name, c) for name, c in curves if any(k in c for k in ADAPTIVE_CURVES)]
    if adaptive:  # the runs that adapted, and the others beside them for comparison
        paths += figures.adaptive_figure(
            curves, report.target, f"{report.title}: batch size, B_noise and workers",
            out_dir / "adaptive",
        )  # fmt: skip
    return paths


def to_markdown(report: Report, figure_paths: Sequence[Path], out_dir: Path) -> str:
    lines = [f"# {report.title}", ""]
    for table in tables(report):
        lines += [f"## {table.title}", "", "| " + " | ".join(table.header) + " |"]
        lines.append("|" + " --- |" * len(table.header))
        lines += [
            "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in table.rows
        ]
        lines += [""] + [f"- {note}" for note in table.notes] + [""]
    lines += ["## Figures", ""]
    for path in figure_paths:
        if path.suffix == ".png":
            lines += [f"![{path.stem}]({path.relative_to(out_dir)})", ""]
    return "\n".join(lines)


def to_html(report: Report, figure_paths: Sequence[Path], out_dir: Path) -> str:
    e = html.escape
    parts = [f"<!doctype html><meta charset='utf-8'><title>{e(report.title)}</title>",
             "<style>body{font-family:sans-serif;max-width:80em;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
             "</style>", f"<h1>{e(report.title)}</h1>"]  # fmt: skip
    for table in tables(report):
        parts.append(f"<h2>{e(table.title)}</h2><table><tr>")
        parts += [f"<th>{e(h)}</th>" for h in table.header] + ["</tr>"]
        for row in table.rows:
            parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
        parts.append("</table><ul>" + "".join(f"<li>{e(n)}</li>" for n in table.notes) + "</ul>")
    parts.append("<h2>Figures</h2>")
    for path in figure_paths:
        if path.suffix == ".svg":
            parts.append(f"<p><img src='{e(str(path.relative_to(out_dir)))}' alt='{e(path.stem)}'>")
    return "\n".join(parts) + "\n"
