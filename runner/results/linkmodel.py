"""The alpha-beta (Hockney) model of each strategy's collective, fitted to measured
communication times on shaped links, and its error on held-out points; and the figure
`runner report` draws for a study of allreduce-micro runs that swept the link. No torch, no
network: bench/shaped_model.py and the runs measure, this fits (numpy, which matplotlib, the
report's extra, brings).

A collective of n bytes among N workers on a link of one-way delay d and rate R takes

    T = A(N) * alpha + B(N) * n / beta,     alpha = alpha0 + a * d,   1 / beta = c0 + c / R

A(N): the latency steps on its critical path, B(N): the bytes the busiest link carries, in
units of n. Ring all-reduce (gloo's flat all-reduce, DDP's buckets, allreduce-micro):
A = 2(N-1), B = 2(N-1)/N. Gather-scatter through rank 0: A = 2 (a gather, then a scatter),
B = 2(N-1) (rank 0's link takes N-1 gradients in, then sends N-1 averages out; full duplex,
but the two phases do not overlap). alpha0 is the per-step cost with no delay (gloo's and the
kernel's), `a` how many one-way delays one step costs (1 on an ideal link), c0 the per-byte
cost no link sets (copies, reduction), `c` how many of a link's bits a byte costs (8, plus
headers, on an ideal one). All four come out of one linear least-squares fit per strategy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Terms = Callable[[int], tuple[float, float]]  # N -> (A, B)


def ring(workers: int) -> tuple[float, float]:
    return 2.0 * (workers - 1), 2.0 * (workers - 1) / workers


def gather_scatter(workers: int) -> tuple[float, float]:
    return 2.0, 2.0 * (workers - 1)


COLLECTIVES: dict[str, Terms] = {
    "allreduce": ring, "ddp": ring, "allreduce-micro": ring, "gather-scatter": gather_scatter,
}  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One measured collective: `time_s` for `size_bytes` among `workers` on a link."""

    strategy: str
    workers: int
    delay_s: float
    rate_bit_s: float
    size_bytes: float
    time_s: float


@dataclass(frozen=True)
class Fit:
    strategy: str
    alpha0_s: float
    alpha_per_delay: float  # one-way delays per latency step
    per_byte_s: float  # c0
    bits_per_byte: float  # c

    def alpha_s(self, delay_s: float) -> float:
        return self.alpha0_s + self.alpha_per_delay * delay_s

    def beta_byte_s(self, rate_bit_s: float) -> float:
        """Effective bytes per second through the link at `rate_bit_s`."""
        return 1.0 / (self.per_byte_s + self.bits_per_byte / rate_bit_s)

    def predict_s(self, p: Point) -> float:
        a, b = COLLECTIVES[p.strategy](p.workers)
        return a * self.alpha_s(p.delay_s) + b * p.size_bytes / self.beta_byte_s(p.rate_bit_s)


def _row(p: Point) -> list[float]:
    a, b = COLLECTIVES[p.strategy](p.workers)
    return [a, a * p.delay_s, b * p.size_bytes, b * p.size_bytes / p.rate_bit_s]


def fit(strategy: str, points: Sequence[Point]) -> Fit:
    """Least squares on relative error (each row divided by its time): a 20 ms collective and
    a 2 s one weigh alike, as the held-out error is judged."""
    import numpy as np

    mine = [p for p in points if p.strategy == strategy]
    x = np.array([[v / p.time_s for v in _row(p)] for p in mine])
    y = np.ones(len(mine))
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return Fit(strategy, *(float(c) for c in coef))


def relative_errors(model: Fit, points: Sequence[Point]) -> list[float]:
    return [abs(model.predict_s(p) - p.time_s) / p.time_s for p in points]


def summary(errors: Sequence[float]) -> str:
    if not errors:
        return "no points"
    ordered = sorted(errors)
    median = ordered[(len(ordered) - 1) // 2]
    return f"median {100 * median:.0f} %, max {100 * ordered[-1]:.0f} % over {len(errors)} points"


def split(points: Sequence[Point], held_delays: set[float], held_rates: set[float]) -> tuple[
    list[Point], list[Point]
]:  # fmt: skip
    """(fit on, held out): a point is held out when its delay or its rate is held out."""
    train = [p for p in points if p.delay_s not in held_delays and p.rate_bit_s not in held_rates]
    held = [p for p in points if p not in train]
    return train, held


def finite(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if math.isfinite(p.time_s) and p.time_s > 0]


def micro_points(runs: Sequence[Any]) -> list[Point]:
    """The points of allreduce-micro runs (RunResult) on shaped links: one per size, float32
    (the other dtypes time the same bytes differently: reduction cost, not the link)."""
    from contract.summary import MicroSummary
    from runner.errors import SpecError
    from runner.job.link import parse_link

    found = []
    for run in runs:
        if run.link is None or not isinstance(run.summary, MicroSummary):
            continue
        try:
            link = parse_link(run.link)
        except SpecError:  # a record from a version that spelled links otherwise
            continue
        found += [
            Point("allreduce-micro", run.world_size, link.delay_us / 1e6, float(link.rate_bit_s),
                  float(m.size_bytes), m.time_us / 1e6)
            for m in run.summary.results if m.dtype == "float32"
        ]  # fmt: skip
    return finite(found)


def fit_figure(runs: Sequence[Any], title: str, base: Path) -> list[Path]:
    """Measured against predicted all-reduce time, the alpha-beta model fitted to a study of
    allreduce-micro runs over at least two links (its alpha and beta in the title); nothing
    when the runs are not such a study."""
    pts = micro_points(runs)
    links = {(p.delay_s, p.rate_bit_s) for p in pts}
    if len(links) < 2 or len(pts) < 4:
        return []
    from runner.results import figures

    model = fit("allreduce-micro", pts)
    plt = figures._pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    points_ms = [(1e3 * model.predict_s(p), 1e3 * p.time_s, 1e3 * p.delay_s) for p in pts]
    shown = ax.scatter([a for a, _, _ in points_ms], [b for _, b, _ in points_ms],
                       c=[d for _, _, d in points_ms], cmap="viridis")  # fmt: skip
    fig.colorbar(shown, label="one-way delay (ms)")
    low, high = min(b for _, b, _ in points_ms), max(b for _, b, _ in points_ms)
    ax.plot([low, high], [low, high], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="predicted (ms)", ylabel="measured (ms)")
    ax.set_title(
        f"{title}: alpha-beta fit, alpha = {1e3 * model.alpha0_s:.3g} ms + "
        f"{model.alpha_per_delay:.2f} d, beta = 1/({model.per_byte_s:.2g} s/B + "
        f"{model.bits_per_byte:.2f} / rate); {summary(relative_errors(model, pts))}",
        fontsize=8,
        wrap=True,
    )
    return figures._save(fig, base)
