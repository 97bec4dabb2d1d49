"""A built report (runner.results.report) as people read it: tables of plain rows with their
notes, figures, and a Markdown or HTML export. Tables are (title, header, rows) of strings, so
the CLI shows them with rich, the dashboard as HTML, and the exports write them as they are.
Never prints.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract import files
from contract.files import DamagedFile
from runner.results import figures, linkmodel
from runner.results.aggregate import OUTLIER_RATIO
from runner.results.keys import PLUGIN
from runner.results.report import EXCLUDED_STATES, Cell, Report
from runner.results.runs import ADAPTIVE_CURVES, RunResult, environment_values
from runner.stack.cost import Cost
from runner.words import count


@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


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
            notes.append(f"{c.series}, {workers(c.workers)}: {c.tta.reason}")
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
        "(efficiency: speedup / the workers' ratio), only between runs whose workers had "
        f"equal resources: {threads_text(report)}"
    )
    notes += baseline_notes(report) + outlier_notes(report)
    return Table("Time to accuracy per cell", header, tuple(rows), tuple(notes))


def workers(n: int) -> str:
    return count(n, "worker")


def threads_text(report: Report) -> str:
    """What each worker had, as the speedup note says it: runs with other threads per worker
    are series of their own (Report.labeller), never a speedup's other end."""
    counts = sorted({r.threads_per_worker for r in report.runs if r.threads_per_worker})
    gpu = ", one GPU each" if any(r.device == "cuda" for r in report.runs) else ""
    if not counts:
        return f"threads per worker not recorded{gpu}"
    each = " or ".join(str(n) for n in counts)
    plural = "" if counts == [1] else "s"
    split = " (each series one count)" if len(counts) > 1 else ""
    return f"{each} intra-op thread{plural} per worker{split}{gpu}"


def aggregation_notes(report: Report) -> list[str]:
    """The rule each cell's mean follows, each line naming its cells: cells with different
    numbers of runs follow different rules, and an unlabelled line would not say whose."""
    cells_by_rule: dict[str, list[str]] = {}
    for c in report.cells:
        cells_by_rule.setdefault(c.tta.rule, []).append(f"{c.series} at {workers(c.workers)}")
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
                f"{series}: speedups are against {workers(base)}, the fewest with a valid time "
                f"({workers(fewest)} {'has' if fewest == 1 else 'have'} none)"
            )
    return notes


def outlier_notes(report: Report) -> list[str]:
    """Runs far from their cell's median, and speedups they may have bent."""
    notes = []
    for c in report.cells:
        for run_id, ratio in c.outliers.items():
            notes.append(
                f"OUTLIER {run_id} ({c.series}, {workers(c.workers)}): time to accuracy "
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
    label = report.labeller()
    header: tuple[str, ...] = ("run", "series", "workers", "seed", "state",
                               "time to accuracy (s)", "final", "comm", "cost")  # fmt: skip
    rows: list[tuple[str, ...]] = []
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
    plugins = [r.keys.get(PLUGIN, "") for r in report.runs]
    if any(plugins):  # whose code each ran: a plugin's name@version, the reference's "-"
        header = (*header[:2], PLUGIN, *header[2:])
        rows = [(*row[:2], p or "-", *row[2:]) for row, p in zip(rows, plugins, strict=True)]
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


def arms_table(report: Report) -> Table | None:
    """Adaptive against fixed as a number, wherever two series differ only by adapting."""
    if not report.arms:
        return None
    header = ("workers", "adaptive", "fixed", "adaptive / fixed", "95% interval", "verdict")
    rows = []
    for arm in report.arms:
        r = arm.ratio
        interval = "-" if r.low is None else f"{r.low:.2f}-{r.high:.2f}"
        rows.append((str(arm.workers), arm.adaptive, arm.fixed, _num(r.ratio, ".2f"), interval,
                     f"{r.verdict} ({r.runs_a} and {r.runs_b} runs)"))  # fmt: skip
    notes = (
        "adaptive / fixed: mean time to target of the adaptive arm over its fixed arm's "
        "(below 1: adaptive is faster); 'no difference' when the interval holds 1",
        f"interval: {report.arms[0].ratio.method}",
    )
    return Table("Adaptive against fixed", header, tuple(rows), notes)


def tables(report: Report) -> list[Table]:
    arms = arms_table(report)
    built = [cells_table(report), *([arms] if arms else []), runs_table(report),
             environment_table(report)]  # fmt: skip
    return [_printable(table) for table in built]


# What str.isprintable() refuses (the CLI's own rule, runner.cli.common): a label from a run
# directory (a --set value in job.json) may hold an escape sequence that drives the terminal, a
# newline that breaks a row, or a bidi override (U+202E) that shows the rest of its line, the
# report's own figures included, reversed in report.md and report.html.
def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with each character that is not printable (controls, bidi and other format
    characters, separators but the space) shown as its escape (`\\x1b`, `\\x0a`, `\\u202e`)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _printable(table: Table) -> Table:
    return Table(
        printable(table.title),
        tuple(printable(h) for h in table.header),
        tuple(tuple(printable(c) for c in row) for row in table.rows),
        tuple(printable(n) for n in table.notes),
    )


# ---- figures and exports -----------------------------------------------------------------

SPEEDUP, TIME_TO_ACCURACY, PHASES = "speedup", "time_to_accuracy", "compute_communication"
CURVES, ADAPTIVE = "curves", "adaptive"
LINK_MODEL = "link_model"  # runner/results/linkmodel.py
FIGURES = (SPEEDUP, TIME_TO_ACCURACY, PHASES, CURVES, ADAPTIVE, LINK_MODEL)
EXPORT_FORMATS = ("md", "html")


def export_path(out_dir: Path, fmt: str) -> Path:
    return out_dir / f"report.{fmt}"


def write_figures(report: Report, out_dir: Path) -> list[Path]:
    """speedup, time_to_accuracy, compute_communication and curves, each as PNG and SVG;
    adaptive (batch size, B_noise, workers and LR beside loss and quality) when a run has
    monitor or decision events."""
    # Labels as the tables show them: a control character is no glyph (matplotlib warned).
    by_series: dict[str, list[Cell]] = {printable(s): [] for s in report.series}
    for c in report.cells:
        by_series[printable(c.series)].append(c)
    paths = figures.speedup_figure(
        {s: [(c.workers, c.speedup) for c in cs] for s, cs in by_series.items()},
        {s: next((c.baseline_workers for c in cs if c.baseline_workers), None)
         for s, cs in by_series.items()},
        f"{report.title}: speedup of time to accuracy", out_dir / SPEEDUP,
    )  # fmt: skip
    paths += figures.time_to_accuracy_figure(
        {s: [(c.workers, c.tta) for c in cs] for s, cs in by_series.items()},
        f"{report.title}: time to accuracy", out_dir / TIME_TO_ACCURACY,
    )  # fmt: skip
    paths += figures.phases_figure(
        {s: [(c.workers, c.phase_ms) for c in cs if c.phase_ms] for s, cs in by_series.items()},
        f"{report.title}: compute and communication per step", out_dir / PHASES,
    )  # fmt: skip
    label = report.labeller()
    curves = [(printable(f"{label(r)}, {workers(r.world_size)}"), r.curves)
              for r in report.runs if r.curves]  # fmt: skip
    paths += figures.curves_figure(
        curves, report.target, f"{report.title}: loss and accuracy", out_dir / CURVES
    )
    # A study of allreduce-micro over several links: the alpha-beta model fitted to it.
    paths += linkmodel.fit_figure(report.runs, report.title, out_dir / LINK_MODEL)
    adaptive = [(name, c) for name, c in curves if any(k in c for k in ADAPTIVE_CURVES)]
    if adaptive:  # the runs that adapted, and the others beside them for comparison
        paths += figures.adaptive_figure(
            curves, report.target, f"{report.title}: batch size, B_noise and workers",
            out_dir / ADAPTIVE,
        )  # fmt: skip
    return paths


# A report's own record of the files it wrote in its folder: a later report removes only
# these, never a file of the same name that a person (or anything else) put there.
WRITTEN_RECORD = ".stackbench-report.json"
_MAX_RECORD_BYTES = 64 << 10  # a few dozen names; anything far larger is not ours


def report_names() -> set[str]:
    """Every name a report can write in its folder."""
    names = {f"{stem}.{fmt}" for stem in FIGURES for fmt in figures.FORMATS}
    return names | {export_path(Path(), fmt).name for fmt in EXPORT_FORMATS}


def earlier_report_files(out_dir: Path) -> set[str]:
    """The names the folder's record says an earlier report wrote, read defensively: a
    missing, linked, damaged or hostile record (`../../.bashrc`, a name no report writes)
    claims nothing, so nothing is removed on its word."""
    try:
        data = files.read_json_object(out_dir / WRITTEN_RECORD, _MAX_RECORD_BYTES)
    except (FileNotFoundError, NotADirectoryError, DamagedFile):
        return set()
    names = data.get("files")
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str)} & report_names()


def remove_stale(out_dir: Path, written: Sequence[Path]) -> list[Path]:
    """Remove what an earlier report wrote in `out_dir` (by its record there) and this one
    did not (a figure no longer drawn, the export in the other format), so that the folder
    holds one report, not pieces of two; then record what this one wrote. A file of a
    report's name that no report recorded (a person's own report.md) is left alone, and a
    link is removed itself, never what it points at. Returns what was removed; OSError when
    the disk refuses."""
    keep = {path.name for path in written}
    removed = []
    for name in sorted(earlier_report_files(out_dir) - keep):
        path = out_dir / name
        if path.is_symlink() or path.is_file():
            path.unlink()
            removed.append(path)
    files.write_json(out_dir / WRITTEN_RECORD, {"files": sorted(keep & report_names())})
    return removed


# What Markdown reads as markup in a table's text: a label such as `![x](http://host/t.png)`
# or `<img src=...>` from a run directory would be an image fetched from elsewhere when the
# report is viewed, and `|` would end its cell. Each is backslash-escaped: shown as itself.
_MARKDOWN = str.maketrans({c: f"\\{c}" for c in "\\`*_[]<>|~"})


def _md(text: str) -> str:
    return printable(text).translate(_MARKDOWN)


def to_markdown(report: Report, figure_paths: Sequence[Path], out_dir: Path) -> str:
    lines = [f"# {_md(report.title)}", ""]
    for table in tables(report):
        lines += [f"## {_md(table.title)}", "", "| " + " | ".join(map(_md, table.header)) + " |"]
        lines.append("|" + " --- |" * len(table.header))
        lines += ["| " + " | ".join(map(_md, row)) + " |" for row in table.rows]
        lines += [""] + [f"- {_md(note)}" for note in table.notes] + [""]
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
