"""The two figures of bench/shaped_network.py, as PNG and SVG:

- shaped_strategies: time per iteration of each strategy at each link, split into compute
  and exposed communication, one panel per worker count (the CS744 comparison);
- shaped_speedup: speedup over one worker against workers, one line per link, one panel per
  strategy (MLBench's speedup curve).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"gather-scatter": "#d62728", "allreduce-per-param": "#ff7f0e",
          "allreduce": "#2ca02c", "ddp": "#1f77b4"}  # fmt: skip


def write_figures(rows: list[dict[str, Any]], out_dir: Path, cores: int) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [*_save(strategies_figure(rows), out_dir / "shaped_strategies"),
            *_save(speedup_figure(rows, cores), out_dir / "shaped_speedup")]  # fmt: skip


def strategies_figure(rows: list[dict[str, Any]]) -> plt.Figure:
    workers = sorted({r["workers"] for r in rows if r["workers"] > 1})
    links = list(dict.fromkeys(r["link"] for r in rows if r["workers"] > 1))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["workers"] > 1))
    fig, axes = plt.subplots(1, len(workers), figsize=(5.5 * len(workers), 4.2), squeeze=False)
    width = 0.8 / len(strategies)
    for ax, k in zip(axes[0], workers, strict=True):
        for j, strategy in enumerate(strategies):
            got = {r["link"]: r for r in rows if r["workers"] == k and r["strategy"] == strategy}
            xs = [i + (j - (len(strategies) - 1) / 2) * width for i in range(len(links))]
            compute = [got[link]["compute_s"] for link in links]
            comm = [got[link]["comm_s"] for link in links]
            color = COLORS.get(strategy)
            ax.bar(xs, compute, width, color=color, alpha=0.35)
            ax.bar(xs, comm, width, bottom=compute, color=color, label=strategy)
        ax.set_xticks(range(len(links)), links)
        ax.set_title(f"{k} workers (pale: compute, solid: exposed communication)", fontsize=9)
        ax.set_ylabel("seconds per iteration")
        ax.set_xlabel("link per worker")
        ax.legend(fontsize=8)
    fig.suptitle("Time per iteration by strategy and link (VGG-11-BN, 1/4 width)")
    fig.tight_layout()
    return fig


def speedup_figure(rows: list[dict[str, Any]], cores: int) -> plt.Figure:
    single = next(r for r in rows if r["workers"] == 1)
    strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["workers"] > 1))
    links = list(dict.fromkeys(r["link"] for r in rows if r["workers"] > 1))
    fig, axes = plt.subplots(1, len(strategies), figsize=(3.6 * len(strategies), 3.6),
                             sharey=True, squeeze=False)  # fmt: skip
    max_k = max(r["workers"] for r in rows)
    for ax, strategy in zip(axes[0], strategies, strict=True):
        # One thread per worker: past `cores` workers, compute per iteration stops shrinking.
        ks = list(range(1, max_k + 1))
        ax.plot(ks, [min(k, cores) for k in ks], color="grey", linestyle=":",
                label=f"ideal on {cores} cores")  # fmt: skip
        for link in links:
            got = sorted((r["workers"], r["speedup"]) for r in rows
                         if r["link"] == link and r["strategy"] == strategy)  # fmt: skip
            ax.plot([1] + [k for k, _ in got], [1.0] + [s for _, s in got], marker="o",
                    label=link)  # fmt: skip
        ax.set_title(strategy, fontsize=10)
        ax.set_xlabel("workers")
        ax.set_xticks(sorted({1, *(r["workers"] for r in rows)}))
    axes[0][0].set_ylabel(f"speedup over 1 worker ({single['time_s']:.2f} s/iter)")
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("Speedup against workers at each link rate")
    fig.tight_layout()
    return fig


def _save(fig: plt.Figure, stem: Path) -> list[Path]:
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=120, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)
    return paths
