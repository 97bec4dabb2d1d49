"""The report's figures, drawn with matplotlib (Agg) and written as PNG and SVG.

Each function takes plain numbers grouped by series (a series is one line of the grid apart
from the worker count, such as `strategy=allreduce`) and a path without suffix; it returns the
files written. matplotlib is imported here only, so that `runner --help` never loads it. Not
here: reading runs or computing statistics (runner.results.runs, runner.results.aggregate).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contract import files
from contract.events import EVAL_ACCURACY, OTHER_PHASE, STEP_PHASES, TRAIN_LOSS
from runner.results.aggregate import Aggregate
from runner.words import count

FORMATS = ("png", "svg")
PHASE_COLORS = {
    "data": "#bdbdbd",
    "forward": "#6baed6",
    "backward": "#3182bd",
    "optimizer": "#9ecae1",
    "communication": "#e6550d",
    OTHER_PHASE: "#f0f0f0",
}
# Compute first, communication on top, so the communication share reads off the bar's top;
# `other` (the loop's time between steps) at the bottom.
STACK_ORDER = (OTHER_PHASE, "data", "forward", "backward", "optimizer", "communication")
# The largest magnitude handed to matplotlib. Its tick locators multiply and exponentiate the
# data's range, so a damaged or hostile record's 1e308 s (or a loss of 1e290 on a log axis)
# printed "RuntimeWarning: overflow" on the terminal or raised OverflowError. No measurement
# comes near it: a value beyond it is left out of the figure, which says so.
PLOT_MAX = 1e100
OFF_SCALE = "off\nscale"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    # Labels come from run directories (--set values in job.json): `$\foo$` in one was read
    # as mathtext, and `runner report` died of its ParseFatalException. Text is text.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def _log_scale(ax: Any) -> None:
    """A log y axis whose ticks read as numbers. Its default formatter writes every tick as
    mathtext (`$\\mathdefault{10^{1}}$`), which _pyplot turns off for labels' sake: the ticks
    of every log axis then showed that markup, wide enough to run over the next panel."""
    from matplotlib.ticker import LogFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def _save(fig: Any, base: Path) -> list[Path]:
    """Each format rendered in memory, then written whole (contract.files): a file planted
    where a figure goes (a link to ~/.bashrc in a shared results directory) is replaced,
    never written through, and a full disk leaves no half figure."""
    paths = []
    try:
        for fmt in FORMATS:
            path = base.with_suffix(f".{fmt}")
            rendered = io.BytesIO()
            fig.savefig(rendered, format=fmt, dpi=150, bbox_inches="tight")
            files.write_bytes(path, rendered.getvalue())
            paths.append(path)
    finally:
        _pyplot().close(fig)
    return paths


def _plottable(*values: float | None) -> bool:
    """Whether every value is a number matplotlib can scale (None: nothing to draw, fine)."""
    return all(v is None or (math.isfinite(v) and abs(v) <= PLOT_MAX) for v in values)


def _points(
    points: Sequence[tuple[float, float]], left_out: list[int]
) -> list[tuple[float, float]]:
    """The points matplotlib can scale; how many it cannot is added to `left_out`."""
    kept = [(x, y) for x, y in points if _plottable(x, y)]
    left_out[0] += len(points) - len(kept)
    return kept


def _note_left_out(fig: Any, left_out: list[int]) -> None:
    """Say on the figure that values were left out, so that a damaged record's point is not
    silently missing."""
    if left_out[0]:
        fig.text(0.01, 0.005, f"{left_out[0]} value(s) beyond ±{PLOT_MAX:g} left out (a "
                 "damaged record?)", fontsize=7, color="red")  # fmt: skip


def speedup_figure(
    series: Mapping[str, Sequence[tuple[int, float | None]]],
    baselines: Mapping[str, int | None],
    title: str,
    base: Path,
) -> list[Path]:
    """Speedup of time to accuracy against workers, with the ideal (linear) line from each
    series' baseline (the fewest workers with a valid time, where its speedup is 1)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    all_workers = sorted({w for points in series.values() for w, _ in points})
    for label, points in series.items():
        valid = [(w, s) for w, s in points if s is not None and _plottable(s)]
        if valid:
            ax.plot(*zip(*valid, strict=True), marker="o", label=label)
        for w, s in points:
            if s is None or not _plottable(s):  # at the axes' foot: y=0 is never drawn
                ax.annotate("no valid time" if s is None else "speedup off scale", (w, 0),
                            xycoords=ax.get_xaxis_transform(), textcoords="offset points",
                            xytext=(0, 5), ha="center", fontsize=7, color="red")  # fmt: skip
    bases = sorted({b for b in baselines.values() if b is not None})
    for base_w in bases:
        ideal = [w for w in all_workers if w >= base_w]
        label = "ideal" if len(bases) == 1 else f"ideal from {count(base_w, 'worker')}"
        ax.plot(ideal, [w / base_w for w in ideal], "k--", lw=1, label=label)
    if all_workers:
        ax.set_xticks(all_workers)
    ax.set_xlabel("workers")
    ax.set_ylabel("speedup of time to accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8)
    return _save(fig, base)


def time_to_accuracy_figure(
    series: Mapping[str, Sequence[tuple[int, Aggregate]]], title: str, base: Path
) -> list[Path]:
    """Grouped bars: aggregated time to accuracy per worker count and series, whiskers from
    the fastest to the slowest kept run; a missing bar says why."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    workers = sorted({w for points in series.values() for w, _ in points})
    width = 0.8 / max(1, len(series))
    labelled: set[str] = set()
    for i, (label, points) in enumerate(series.items()):
        by_w = dict(points)
        for j, w in enumerate(workers):
            agg = by_w.get(w)
            x = j + (i - (len(series) - 1) / 2) * width
            if agg is None:
                continue
            if agg.mean_s is None:
                ax.text(x, 0, "not\nconverged", ha="center", va="bottom", fontsize=7, color="red")
                continue
            low, high = agg.min_s or agg.mean_s, agg.max_s or agg.mean_s
            if not _plottable(agg.mean_s, low, high):  # the table has the number
                ax.text(x, 0, OFF_SCALE, ha="center", va="bottom", fontsize=7, color="red")
                continue
            err = [[agg.mean_s - low], [high - agg.mean_s]]
            ax.bar(x, agg.mean_s, width, yerr=err, capsize=3, color=f"C{i}",
                   label=None if label in labelled else label)  # fmt: skip
            labelled.add(label)
    ax.set_xticks(range(len(workers)), [str(w) for w in workers])
    ax.set_xlabel("workers")
    ax.set_ylabel("time to accuracy (s)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.annotate("bars: mean of the runs kept; whiskers: fastest to slowest of them",
                xy=(0, -0.16), xycoords="axes fraction", fontsize=7, color="0.35")  # fmt: skip
    if labelled:
        _legend(ax, fontsize=8)
    return _save(fig, base)


def phases_figure(
    series: Mapping[str, Sequence[tuple[int, Mapping[str, float]]]], title: str, base: Path
) -> list[Path]:
    """Stacked bars of the mean time per step by phase (compute below, communication on top),
    one bar per worker count and series."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bars: list[tuple[str, Mapping[str, float]]] = []
    for label, points in series.items():
        for w, phases in sorted(points):
            name = f"{w}" if len(series) == 1 else f"{w}\n{label}"
            # A bar whose phases (or their sum) cannot be scaled is drawn empty and says so.
            plottable = _plottable(*phases.values(), math.fsum(phases.values()))
            bars.append((name, phases if plottable else {OFF_SCALE: 0.0}))
    bottoms = [0.0] * len(bars)
    for phase in STACK_ORDER:
        heights = [phases.get(phase, 0.0) for _, phases in bars]
        hatch = "//" if phase == "communication" else None
        ax.bar(range(len(bars)), heights, 0.6, bottom=bottoms, label=phase,
               color=PHASE_COLORS[phase], hatch=hatch)  # fmt: skip
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for x, (total, (_, phases)) in enumerate(zip(bottoms, bars, strict=True)):
        share = phases.get("communication", 0.0) / total if total else 0.0
        text = OFF_SCALE if OFF_SCALE in phases else f"{100 * share:.0f}% comm"
        ax.text(x, total, text, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(bars)), [name for name, _ in bars], fontsize=8)
    ax.set_xlabel("workers")
    ax.set_ylabel("time per step (ms)")
    ax.set_title(title)
    _legend(ax, fontsize=8, reverse=True)
    assert set(STACK_ORDER) == {*STEP_PHASES, OTHER_PHASE}  # a new phase needs a colour
    return _save(fig, base)


def curves_figure(
    runs: Sequence[tuple[str, Mapping[str, Sequence[tuple[float, float]]]]],
    target: float | None,
    title: str,
    base: Path,
) -> list[Path]:
    """Training loss and evaluation accuracy against seconds since run_start, one line per run
    (runs with the same label share a colour)."""
    plt = _pyplot()
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors: dict[str, str] = {}
    left_out = [0]
    for label, curves in runs:
        first = label not in colors
        color = colors.setdefault(label, f"C{len(colors) % 10}")
        for ax, key in ((loss_ax, TRAIN_LOSS), (acc_ax, EVAL_ACCURACY)):
            points = _points(curves.get(key) or (), left_out)
            if points:
                ax.plot(*zip(*points, strict=True), color=color, alpha=0.7, marker=".",
                        label=label if first else None)  # fmt: skip
    if target is not None and _plottable(target):
        acc_ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
    _note_left_out(fig, left_out)
    loss_ax.set(xlabel="time since run_start (s)", ylabel="training loss")
    _log_scale(loss_ax)
    acc_ax.set(xlabel="time since run_start (s)", ylabel="quality metric (eval_accuracy)")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        _legend(ax, fontsize=7)
    fig.suptitle(title)
    return _save(fig, base)


# Panels of the adaptive figure: (curve key, y label, log scale, drawn as steps).
ADAPTIVE_PANELS = (
    (TRAIN_LOSS, "training loss", True, False),
    (EVAL_ACCURACY, "quality metric (eval_accuracy)", False, False),
    ("global_batch", "global batch (samples)", True, True),
    ("b_noise", "B_noise (smoothed, samples)", True, False),
    ("workers", "workers", False, True),
    ("lr", "learning rate", False, True),
)


def adaptive_figure(
    runs: Sequence[tuple[str, Mapping[str, Sequence[tuple[float, float]]]]],
    target: float | None,
    title: str,
    base: Path,
) -> list[Path]:
    """An adaptive run's knobs and monitors beside its loss and quality, against seconds
    since run_start, one line per run (runs with the same label share a colour): the global
    batch, B_noise, the worker count and the LR, drawn as steps where they change at once."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5), sharex=True)
    colors: dict[str, str] = {}
    left_out = [0]
    for label, curves in runs:
        first = label not in colors
        color = colors.setdefault(label, f"C{len(colors) % 10}")
        for ax, (key, _, _, steps) in zip(axes.flat, ADAPTIVE_PANELS, strict=True):
            points = _points(curves.get(key) or (), left_out)
            if points:
                ax.plot(*zip(*points, strict=True), color=color, alpha=0.75, lw=1.3,
                        drawstyle="steps-post" if steps else "default",
                        label=label if first else None)  # fmt: skip
    if target is not None and _plottable(target):
        axes.flat[1].axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
    _note_left_out(fig, left_out)
    from matplotlib.ticker import MaxNLocator

    for ax, (key, ylabel, log, _) in zip(axes.flat, ADAPTIVE_PANELS, strict=True):
        ax.set(ylabel=ylabel)
        if log and ax.has_data():
            _log_scale(ax)
        ax.grid(alpha=0.3)
        if key == "workers":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[1]:
        ax.set_xlabel("time since run_start (s)")
    _legend(axes.flat[0], fontsize=7)
    _legend(axes.flat[1], fontsize=7)
    fig.suptitle(title)
    return _save(fig, base)


def _legend(ax: Any, **options: Any) -> None:
    """A legend where something is labelled: a figure of runs without a valid time has no
    line to name, and matplotlib would warn on the terminal."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**options)
