"""N-run statistics: the MLPerf aggregation of time to accuracy, speedups, and step-phase means.

Pure functions over numbers; reading run directories is runner.results.runs' job, showing the
numbers runner.results.report's and export's. Not here: any notion of files, figures or cost.

The MLPerf training rule (mlcommons/training_policies, "Benchmark results"): with at least five
runs, drop the fastest and the slowest and take the mean of the rest (an "olympic" mean). A run
that did not reach the target counts as infinitely slow, so one such run is dropped as the
slowest; a second one makes the result invalid. With fewer than five runs nothing may be
dropped: the mean of all runs, valid only if every run converged, and labelled as such.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MLPERF_MIN_RUNS = 5  # from this many runs on, the fastest and slowest are dropped


@dataclass(frozen=True)
class Aggregate:
    """Time to target over N runs of one configuration, by the MLPerf rule."""

    num_runs: int
    num_converged: int
    mean_s: float | None  # None: no valid result (reason says why)
    kept_s: tuple[float, ...]  # the times averaged
    dropped_s: tuple[float, ...]  # the times dropped (inf: a run that did not converge)
    rule: str
    reason: str = ""

    @property
    def valid(self) -> bool:
        return self.mean_s is not None

    @property
    def std_s(self) -> float | None:
        """Sample standard deviation of the kept times (None under two)."""
        return statistics.stdev(self.kept_s) if len(self.kept_s) > 1 else None

    @property
    def min_s(self) -> float | None:
        return min(self.kept_s, default=None)

    @property
    def max_s(self) -> float | None:
        return max(self.kept_s, default=None)


def mlperf_aggregate(times_s: Sequence[float | None]) -> Aggregate:
    """Aggregate times to target; None (or inf) marks a run that never reached the target."""
    times = [math.inf if t is None else float(t) for t in times_s]
    converged = sum(1 for t in times if math.isfinite(t))
    n = len(times)
    if n == 0:
        return Aggregate(0, 0, None, (), (), "no runs", "no runs")
    if n >= MLPERF_MIN_RUNS:
        ordered = sorted(times)
        kept, dropped = ordered[1:-1], (ordered[0], ordered[-1])
        rule = f"MLPerf: mean of {len(kept)} of {n} runs (fastest and slowest dropped)"
        failed = n - converged
        if failed > 1:
            # No result: nothing is averaged, and the misses (inf) are no times to show a
            # spread of; what is kept are the times of the runs that did converge.
            reason = f"{failed} of {n} runs missed the target; MLPerf allows at most one"
            finite = tuple(t for t in ordered if math.isfinite(t))
            return Aggregate(n, converged, None, finite, (), rule, reason)
        return Aggregate(n, converged, _mean(kept), tuple(kept), dropped, rule)
    rule = f"mean of all {n} runs (fewer than {MLPERF_MIN_RUNS}: nothing dropped)"
    if converged < n:
        reason = f"{n - converged} of {n} runs missed the target, and with fewer than "
        reason += f"{MLPERF_MIN_RUNS} runs none may be dropped"
        finite = tuple(t for t in times if math.isfinite(t))
        return Aggregate(n, converged, None, finite, (), rule, reason)
    return Aggregate(n, converged, _mean(times), tuple(times), (), rule)


def _mean(times: Sequence[float]) -> float:
    """The mean of finite times, even when their sum is past the float range (a damaged
    summary's 1e308 s must make a huge mean, not an OverflowError)."""
    try:
        return statistics.fmean(times)
    except OverflowError:
        return math.fsum(t / len(times) for t in times)


# A run whose time to target is this many times its cell's median, or less than the median
# divided by it, is flagged: "far from its cell's median". A ratio, not a multiple of the
# spread, because cells hold 3 to 5 runs, too few for a standard deviation to mean much.
OUTLIER_RATIO = 1.5


def outliers(times_s: Mapping[str, float | None]) -> dict[str, float]:
    """The runs far from their cell's median time to target, each with its ratio to the
    median (runs that missed the target have no time and are not outliers, they are misses).
    Needs three runs with a time: with fewer, the median is one of two runs."""
    valid = {k: t for k, t in times_s.items() if t is not None and math.isfinite(t) and t > 0}
    if len(valid) < 3:
        return {}
    median = statistics.median(valid.values())
    ratios = {k: t / median for k, t in valid.items()}
    return {k: r for k, r in ratios.items() if r > OUTLIER_RATIO or r < 1 / OUTLIER_RATIO}


@dataclass(frozen=True)
class Speedup:
    workers: int
    speedup: float | None  # baseline time / this time
    efficiency: float | None  # speedup / (workers / baseline workers)
    # The baseline's workers: the fewest with a valid time, not always the fewest run.
    base_workers: int | None = None


def speedups(time_by_workers: Mapping[int, float | None]) -> list[Speedup]:
    """Speedup of time to target against the fewest workers that have a valid time."""
    valid = {w: t for w, t in time_by_workers.items() if t is not None and t > 0}
    if not valid:
        return [Speedup(w, None, None) for w in sorted(time_by_workers)]
    base_workers = min(valid)
    base_s = valid[base_workers]
    out = []
    for workers in sorted(time_by_workers):
        t = valid.get(workers)
        speedup = base_s / t if t is not None else None
        scale = workers / base_workers
        efficiency = speedup / scale if speedup is not None else None
        out.append(Speedup(workers, speedup, efficiency, base_workers))
    return out


def mean_phase_ms_per_step(
    runs: Sequence[tuple[Mapping[str, float], int]],
) -> dict[str, float]:
    """Mean over runs of each phase's time per step, in ms, from (phases_s, steps) pairs.

    A plain mean, not the MLPerf rule: the phase split describes where time goes, it is not a
    result that an outlier could flatter. Runs without steps are left out.
    """
    per_run = [
        {phase: 1000 * seconds / steps for phase, seconds in phases_s.items()}
        for phases_s, steps in runs
        if steps > 0
    ]
    if not per_run:
        return {}
    phases = per_run[0].keys()
    return {p: statistics.fmean(r.get(p, 0.0) for r in per_run) for p in phases}


# The adaptive-versus-fixed ratio's interval: a seeded percentile bootstrap, so a report
# says the same numbers every time it is built from the same runs.
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
BOOTSTRAP_LEVEL = 0.95
# Runs that reached the target each arm needs for an interval: resamples of two runs take
# three values, and an interval of those says "faster" on noise.
MIN_RATIO_RUNS = 3


@dataclass(frozen=True)
class Ratio:
    """Mean time to target of arm A over arm B, with a bootstrap confidence interval."""

    ratio: float | None  # None: too few runs that reached the target in an arm
    low: float | None
    high: float | None
    runs_a: int  # runs that reached the target, in each arm
    runs_b: int
    method: str

    @property
    def verdict(self) -> str:
        """'no difference' when the interval holds 1; else which arm is faster."""
        if self.ratio is None or self.low is None or self.high is None:
            return "too few runs"
        if self.low <= 1.0 <= self.high:
            return "no difference"
        return "faster" if self.high < 1.0 else "slower"


def ratio_interval(
    times_a: Sequence[float | None],
    times_b: Sequence[float | None],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = BOOTSTRAP_LEVEL,
    seed: int = BOOTSTRAP_SEED,
) -> Ratio:
    """mean(A) / mean(B) of the runs that reached the target, and its percentile bootstrap
    interval: each resample draws as many runs as each arm has, with replacement, from that
    arm alone (the arms are independent runs, not pairs). Needs MIN_RATIO_RUNS in each arm."""
    import random

    a = [t for t in times_a if t is not None and math.isfinite(t) and t > 0]
    b = [t for t in times_b if t is not None and math.isfinite(t) and t > 0]
    method = (f"percentile bootstrap of mean/mean, {resamples} resamples, seed {seed}, "
              f"{level:.0%} interval, over the runs that reached the target")  # fmt: skip
    if len(a) < MIN_RATIO_RUNS or len(b) < MIN_RATIO_RUNS:
        return Ratio(None, None, None, len(a), len(b), method)
    rng = random.Random(seed)
    ratios = sorted(
        statistics.fmean(rng.choices(a, k=len(a))) / statistics.fmean(rng.choices(b, k=len(b)))
        for _ in range(resamples)
    )
    tail = (1.0 - level) / 2
    low = ratios[int(tail * (resamples - 1))]
    high = ratios[int((1.0 - tail) * (resamples - 1))]
    return Ratio(_mean(a) / _mean(b), low, high, len(a), len(b), method)
