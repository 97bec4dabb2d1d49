"""Which runs of one cell of a study stand apart: the outliers the study page flags.

A run's time to target is an outlier when its modified z-score, 0.6745 (x - median) / MAD,
exceeds 3.5 in absolute value (Iglewicz and Hoaglin, "How to Detect and Handle Outliers",
1993). The median and the median absolute deviation are not dragged by the outliers they look
for, as a mean and a standard deviation over a handful of runs are. When more than half the
runs share one time (MAD is zero), the mean absolute deviation stands in, scaled to agree
with the MAD on normal data (their recommendation). It needs five converged runs, the number
from which the MLPerf rule drops the fastest and the slowest: with three, one deviation is
always zero and the MAD is just the smaller of the other two, so ordinary spread would be
flagged. A run that missed the target while another run of its cell reached it is flagged
whatever the number of runs.

This flags; it drops nothing. Which runs the MLPerf mean leaves out is the aggregation's rule
(runner.results.aggregate), shown beside these flags. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MODIFIED_Z_LIMIT = 3.5
MIN_CONVERGED = 5
_MAD_SCALE = 0.6745  # the normal distribution's MAD in standard deviations
_MEAN_AD_SCALE = 0.7979  # the normal distribution's mean absolute deviation, likewise

SLOW, FAST, MISSED = "slow outlier", "fast outlier", "missed the target"


def flags(times_s: Sequence[float | None]) -> list[str | None]:
    """Per run (None: it missed the target): SLOW, FAST, MISSED or None."""
    converged = [t for t in times_s if t is not None]
    out: list[str | None] = [MISSED if t is None and converged else None for t in times_s]
    if len(converged) < MIN_CONVERGED:
        return out
    median = statistics.median(converged)
    deviations = [abs(t - median) for t in converged]
    mad = statistics.median(deviations)
    scale = mad / _MAD_SCALE if mad > 0 else statistics.fmean(deviations) / _MEAN_AD_SCALE
    if scale == 0:
        return out  # every run took the same time
    for i, t in enumerate(times_s):
        if t is not None and abs(t - median) / scale > MODIFIED_Z_LIMIT:
            out[i] = SLOW if t > median else FAST
    return out
