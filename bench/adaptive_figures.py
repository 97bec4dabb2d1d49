"""The figures of bench/adaptive_batch_study.py, as small PNGs:

- adaptive_time_to_target: every run's time to target, fixed and adaptive side by side, one
  panel per task, with each arm's MLPerf aggregate as a bar (a missed target drawn at the
  top, marked);
- adaptive_run_<task>: one representative adaptive run (the median time to target among
  those that reached it): training loss and eval accuracy, then global batch and smoothed
  B_noise, against seconds since run_start, the decisions as vertical lines.
The curves come from the run directory (runner.results.runs.curves); nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from contract.events import EVAL_ACCURACY, TRAIN_LOSS
from runner.results.runs import B_NOISE, GLOBAL_BATCH, RunResult

COLORS = {"none": "#1f77b4", "adaptive": "#d62728"}  # the arms (adaptive_batch_study.py)
LABELS = {"none": "fixed", "adaptive": "adaptive"}
DPI = 100


def time_figure(tasks: Mapping[str, Mapping[str, Any]], out_dir: Path) -> Path:
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks.values(), strict=True):
        times = [r["time_to_target_s"] for rows in task["rows"].values() for r in rows]
        top = 1.15 * max((t for t in times if t is not None), default=1.0)
        for x, (policy, rows) in enumerate(task["rows"].items()):
            mean = task["aggregate"][policy]["mean_s"]
            if mean is not None:
                ax.bar(x, mean, 0.6, color=COLORS[policy], alpha=0.3)
                ax.text(x, mean, f"{mean:.1f} s", ha="center", va="bottom", fontsize=8)
            for j, row in enumerate(rows):
                t = row["time_to_target_s"]
                dx = (j - (len(rows) - 1) / 2) * 0.08
                marker, y = ("x", top) if t is None else ("o", t)
                ax.plot(x + dx, y, marker, color=COLORS[policy], ms=5)
        ax.set_xticks(range(len(task["rows"])), [LABELS[p] for p in task["rows"]])
        ax.set_title(f"{task['benchmark']}, 2 workers", fontsize=9)
        ax.set_ylabel("time to target (s)")
        ax.set_ylim(0, top * 1.05)
        ax.grid(axis="y", alpha=0.3)
    note = "dots: runs (x: target missed); bars: MLPerf aggregate (fastest and slowest dropped)"
    fig.text(0.01, 0.01, note, fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _save(fig, out_dir / "adaptive_time_to_target.png")


def representative(runs: Sequence[RunResult]) -> RunResult | None:
    """The run with the median time to target among those that reached it."""
    reached = sorted((r for r in runs if r.time_to_target_s is not None),
                     key=lambda r: r.time_to_target_s or 0.0)  # fmt: skip
    return reached[(len(reached) - 1) // 2] if reached else None


def run_figure(
    task: str, runs: Sequence[RunResult], rows: Sequence[Mapping[str, Any]], out_dir: Path
) -> list[Path]:
    run = representative(runs)
    if run is None:
        return []
    curves = run.curves
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), sharex=True)
    _plot(left, curves.get(TRAIN_LOSS), "training loss (per epoch)", "C0", "o")
    acc = left.twinx()
    _plot(acc, curves.get(EVAL_ACCURACY), "eval accuracy", "C2", "s")
    target = run.config.get("target_value")
    if isinstance(target, int | float):
        acc.axhline(target, color="C2", ls="--", lw=0.8)
    left.set_ylabel("training loss", color="C0")
    acc.set_ylabel("eval accuracy (dashed: target)", color="C2")
    _plot(right, curves.get(GLOBAL_BATCH), "global batch", "C3", None, steps=True)
    _plot(right, curves.get(B_NOISE), "B_noise (smoothed)", "C1", ".")
    right.set_yscale("log", base=2)
    right.set_ylabel("samples")
    right.legend(fontsize=7, loc="upper left")
    for ax in (left, right):
        ax.set_xlabel("seconds since run_start")
        ax.grid(alpha=0.3)
        if run.time_to_target_s is not None:
            ax.axvline(run.time_to_target_s, color="k", lw=0.8, ls=":")
    changes = next((r["batch_changes"] for r in rows if r["run_id"] == run.run_id), 0)
    fig.suptitle(f"{run.benchmark}, adaptive batch, seed {run.seed}: {changes} batch change(s) "
                 f"(dotted: target reached)", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return [_save(fig, out_dir / f"adaptive_run_{task}.png")]


def _plot(ax: Any, points: Sequence[tuple[float, float]] | None, label: str, color: str,
          marker: str | None, steps: bool = False) -> None:  # fmt: skip
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=color, marker=marker, ms=3, lw=1.2, label=label,
                drawstyle="steps-post" if steps else "default")  # fmt: skip


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
