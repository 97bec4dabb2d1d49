"""The gradient noise scale and the gradient variance across workers, as pure functions.

Sources. McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training"
(2018, arXiv:1812.06162), appendix A.1: with G the true gradient and Sigma the per-sample
gradient covariance, the gradient of a batch of B samples satisfies
    E|G_B|^2 = |G|^2 + tr(Sigma) / B,
so norms measured at two batch sizes b < B give unbiased estimates
    |G|^2     ~ (B |G_B|^2 - b |G_b|^2) / (B - b)
    tr(Sigma) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B),
each smoothed by an exponential moving average before their ratio, the "simple" noise scale
    B_noise = tr(Sigma) / |G|^2
(the ratio of two noisy unbiased estimates is biased; smoothing both first keeps it stable).
In data-parallel training b is the per-worker batch and B = b x world: |G_b|^2 is a worker's
local gradient and |G_B|^2 the all-reduced one. KungFu (lsds/KungFu,
srcs/python/kungfu/tensorflow/ops/monitor.py `global_noise_scale` and the NoiseScale kernel
in srcs/cpp/src/tensorflow/ops/cpu/collective.cpp) computes exactly these two estimates, each
through an EMA that starts at its first value (srcs/cpp/include/kungfu/utils/ema.hpp), from the
one worker's local gradient. Here |G_b|^2 is the mean over workers of the local squared norms,
which has the same expectation and a W times smaller variance, and costs one scalar per worker.

Unequal local batches (token batching: each worker's gradient is the mean over its own b_w
tokens, and the all-reduce averages the workers equally) generalise with the harmonic mean:
    E mean_w |g_w|^2 = |G|^2 + tr(Sigma) h,   E |mean_w g_w|^2 = |G|^2 + tr(Sigma) h / W,
with h = mean_w 1/b_w, so the formulas above hold with b = 1/h and B = W/h.

The gradient variance across workers is the unbiased sample variance of the W local gradients
(its trace), (1/(W-1)) sum_w |g_w - mean g|^2 = W/(W-1) (mean_w |g_w|^2 - |mean_w g_w|^2): the
same two numbers again, no further communication. KungFu's MonitorGradientVarianceOptimizer
(srcs/python/kungfu/tensorflow/optimizers/grad_variance.py) all-reduces the squared gradients,
a second full-size all-reduce, to get a per-tensor variance; the trace needs none.

Not here: reading the norms out of a training step (probes.py) or communicating them
(monitors.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NoiseEstimates:
    """One step's unbiased estimates (either may be negative: they are noisy)."""

    grad_sq: float  # |G|^2
    trace_sigma: float  # tr(Sigma), per sample


def effective_batches(local_batches: Sequence[float]) -> tuple[float, float]:
    """(b, B) for workers whose local gradients average local_batches[w] samples each: the
    harmonic mean and world times it (b x world for equal batches)."""
    if not local_batches or min(local_batches) <= 0:
        raise ValueError(f"local batches must be positive, got {list(local_batches)}")
    small = len(local_batches) / sum(1.0 / b for b in local_batches)
    return small, small * len(local_batches)


def simple_estimates(
    small_sq_norm: float, big_sq_norm: float, small_batch: float, big_batch: float
) -> NoiseEstimates:
    """McCandlish et al. A.1: |G|^2 and tr(Sigma) from |G_b|^2 and |G_B|^2 at b < B."""
    if not 0 < small_batch < big_batch:
        raise ValueError(f"need 0 < b < B, got b={small_batch}, B={big_batch}")
    grad_sq = (big_batch * big_sq_norm - small_batch * small_sq_norm) / (big_batch - small_batch)
    trace_sigma = (small_sq_norm - big_sq_norm) / (1.0 / small_batch - 1.0 / big_batch)
    return NoiseEstimates(grad_sq, trace_sigma)


def worker_variance(local_sq_norms: Sequence[float], mean_sq_norm: float) -> float:
    """Trace of the unbiased sample covariance of the workers' local gradients, from their
    squared norms and the squared norm of their mean."""
    world = len(local_sq_norms)
    if world < 2:
        raise ValueError("the variance across workers needs at least 2 workers")
    mean_local = sum(local_sq_norms) / world
    return world / (world - 1) * (mean_local - mean_sq_norm)


@dataclass(frozen=True)
class Ema:
    """An exponential moving average that starts at its first value (KungFu's ema.hpp):
    value <- decay * value + (1 - decay) * x. Immutable: update returns the next one.
    `count` is how many values it has taken: until about 1/(1 - decay) (its memory) it
    mostly holds its first ones."""

    decay: float
    value: float | None = None
    count: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {self.decay}")

    def update(self, x: float) -> Ema:
        if not math.isfinite(x):
            return self  # a non-finite sample (an overflowed step) must not poison the mean
        if self.value is None:
            return Ema(self.decay, x, 1)
        value = self.decay * self.value + (1.0 - self.decay) * x
        return Ema(self.decay, value, self.count + 1)


@dataclass(frozen=True)
class NoiseScale:
    """The smoothed simple noise scale: two EMAs, then their ratio."""

    grad_sq: Ema
    trace_sigma: Ema

    @classmethod
    def start(cls, decay: float) -> NoiseScale:
        return cls(Ema(decay), Ema(decay))

    def update(self, estimates: NoiseEstimates) -> NoiseScale:
        return NoiseScale(
            self.grad_sq.update(estimates.grad_sq),
            self.trace_sigma.update(estimates.trace_sigma),
        )

    @property
    def readings(self) -> int:
        """The estimates both EMAs have taken."""
        return min(self.grad_sq.count, self.trace_sigma.count)

    @property
    def b_noise(self) -> float | None:
        """tr(Sigma)/|G|^2 in samples; None until both EMAs exist and |G|^2 is positive (while
        the smoothed |G|^2 is not, the noise dominates so much that no batch is too big), and
        None when the ratio overflows (huge gradients over a tiny smoothed |G|^2): no policy
        can size a batch from an infinite noise scale."""
        g, s = self.grad_sq.value, self.trace_sigma.value
        if g is None or s is None or g <= 0.0:
            return None
        ratio = max(0.0, s) / g
        return ratio if math.isfinite(ratio) else None
