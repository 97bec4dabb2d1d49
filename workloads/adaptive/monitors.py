"""Training monitors: one small all-gather every `interval_steps` steps, the same values on
every rank.

At a monitoring step each rank contributes one row of ROW_FIELDS (float64): its local and the
averaged gradient's squared norms (read by probes.py during that step's exchange), the
samples in its local gradient, its mean step and compute time since the previous gather
(compute: every phase but communication, so a straggler shows), and, when a model-averaging
strategy has averaged since then, its replica's squared distance from the average and the
averaged model's squared norm. One all-gather of W rows is the only communication; every rank
then computes the same Snapshot from the same bytes with the same float operations, so the
values, and any decision drawn from them alone, are identical everywhere.

The gather runs inside the monitored step, after the optimizer (the loop laps it as
communication), so its cost is charged to the step it belongs to. On CUDA the .cpu() of the
gathered rows synchronises the host with the device once per interval.
Not here: the formulas (noise.py), the probe (probes.py), deciding anything (policy.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from contract.events import STEP_PHASES
from workloads.adaptive.config import reading_decay
from workloads.adaptive.noise import (
    NoiseEstimates,
    NoiseScale,
    effective_batches,
    simple_estimates,
    worker_variance,
)
from workloads.adaptive.probes import GradientProbe, ProbeReading, sq_norm

ROW_FIELDS = (
    "local_sq_norm",
    "mean_sq_norm",
    "local_batch",
    "step_time_s",
    "compute_time_s",
    "divergence_sq",
    "param_sq_norm",
)
NAN = float("nan")
COMPUTE_PHASES = tuple(p for p in STEP_PHASES if p != "communication")


@dataclass(frozen=True)
class MonitorConfig:
    interval_steps: int = 10
    ema_decay: float = 0.9  # KungFu's default for its noise-scale EMAs, per EMA_STEPS steps

    def __post_init__(self) -> None:
        if self.interval_steps < 1:
            raise ValueError(f"interval_steps must be at least 1, got {self.interval_steps}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")

    @property
    def reading_decay(self) -> float:
        """The EMAs' decay per reading (config.reading_decay: the same memory in steps at
        every interval)."""
        return reading_decay(self.ema_decay, self.interval_steps)


@dataclass(frozen=True)
class Snapshot:
    """The monitors at one step, identical on every rank; None where not measurable."""

    step: int  # optimizer steps completed when it was taken
    world_size: int
    small_batch: float | None = None  # b (harmonic mean of the local batches)
    big_batch: float | None = None  # B = b x world
    estimates: NoiseEstimates | None = None  # this step's unbiased |G|^2 and tr(Sigma)
    grad_sq_ema: float | None = None
    trace_sigma_ema: float | None = None
    b_noise: float | None = None  # smoothed simple noise scale, in samples
    noise_readings: int = 0  # the estimates its EMAs have taken so far
    grad_variance: float | None = None  # trace of the covariance of the workers' gradients
    # Per worker, the mean since the previous snapshot (None: no step finished since).
    step_time_s: tuple[float | None, ...] = ()
    compute_time_s: tuple[float | None, ...] = ()
    divergence: float | None = None  # mean_w |theta_w - mean|^2 / |mean|^2 at the last average
    param_sq_norm: float | None = None

    def to_event(self) -> dict[str, Any]:
        """The event value (JSON-ready; the estimates flattened)."""
        out: dict[str, Any] = {
            "step": self.step,
            "world_size": self.world_size,
            "b_noise": self.b_noise,
            "noise_readings": self.noise_readings,
            "grad_sq_ema": self.grad_sq_ema,
            "trace_sigma_ema": self.trace_sigma_ema,
            "grad_variance": self.grad_variance,
            "small_batch": self.small_batch,
            "big_batch": self.big_batch,
            "step_time_s": list(self.step_time_s),
            "compute_time_s": list(self.compute_time_s),
            "divergence": self.divergence,
        }
        if self.estimates is not None:
            out["grad_sq"] = self.estimates.grad_sq
            out["trace_sigma"] = self.estimates.trace_sigma
        return out


@dataclass(frozen=True)
class GradientFigures:
    """What one interval's norms give: the batches, the estimates, the workers' variance."""

    small_batch: float
    big_batch: float
    estimates: NoiseEstimates
    variance: float


def summarize(rows: list[list[float]], step: int, noise: NoiseScale) -> tuple[Snapshot, NoiseScale]:
    """The snapshot of gathered rows (one per rank, ROW_FIELDS) and the updated noise EMAs."""
    col = {name: [row[i] for row in rows] for i, name in enumerate(ROW_FIELDS)}
    figures = gradient_figures(col["local_sq_norm"], col["mean_sq_norm"], col["local_batch"])
    if figures is not None:
        noise = noise.update(figures.estimates)
    divergence, param_sq = _divergence(col["divergence_sq"], col["param_sq_norm"])
    snapshot = Snapshot(
        step=step,
        world_size=len(rows),
        grad_sq_ema=noise.grad_sq.value,
        trace_sigma_ema=noise.trace_sigma.value,
        b_noise=noise.b_noise,
        noise_readings=noise.readings,
        step_time_s=_finite_or_none(col["step_time_s"]),
        compute_time_s=_finite_or_none(col["compute_time_s"]),
        divergence=divergence,
        param_sq_norm=param_sq,
    )
    if figures is not None:
        snapshot = dataclasses.replace(
            snapshot,
            small_batch=figures.small_batch,
            big_batch=figures.big_batch,
            estimates=figures.estimates,
            grad_variance=figures.variance,
        )
    return snapshot, noise


def gradient_figures(
    local_sq: list[float], mean_sq: list[float], local_batches: list[float]
) -> GradientFigures | None:
    """The noise-scale figures of one interval's rows, or None when a rank had no reading or
    the world is 1 (then b = B, and the estimator needs two batch sizes)."""
    world = len(local_sq)
    values = local_sq + mean_sq + local_batches
    if world < 2 or not all(map(math.isfinite, values)) or min(local_batches) <= 0:
        return None
    small, big = effective_batches(local_batches)
    mean = sum(mean_sq) / world  # the same on every row for exact strategies
    return GradientFigures(
        small_batch=small,
        big_batch=big,
        estimates=simple_estimates(sum(local_sq) / world, mean, small, big),
        variance=worker_variance(local_sq, mean),
    )


def _finite_or_none(values: list[float]) -> tuple[float | None, ...]:
    return tuple(v if math.isfinite(v) else None for v in values)


def _divergence(
    divergence_sq: list[float], param_sq_norms: list[float]
) -> tuple[float | None, float | None]:
    """(relative divergence, |theta|^2): None where no rank measured it since the last gather."""
    params = [p for p in param_sq_norms if math.isfinite(p)]
    param_sq = sum(params) / len(params) if params else None
    if not param_sq or not all(map(math.isfinite, divergence_sq)):
        return None, param_sq
    return sum(divergence_sq) / len(divergence_sq) / param_sq, param_sq


@dataclass
class Monitor:
    """One rank's side of the monitors. Call, per step: begin_step before forward;
    exchange after the optimizer (and the strategy's after_step), which gathers on monitoring
    steps; record_time with the finished step's phases."""

    config: MonitorConfig
    device: torch.device
    probe: GradientProbe = field(default_factory=GradientProbe)
    params: list[torch.Tensor] | None = None  # set to report |theta|^2 (adaptive sync needs it)
    noise: NoiseScale = field(init=False)
    _times: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # step, compute, n
    _divergence: tuple[float, float] = (NAN, NAN)

    def __post_init__(self) -> None:
        self.noise = NoiseScale.start(self.config.reading_decay)

    def due(self, step: int) -> bool:
        """Whether step `step` (0-based: optimizer steps done before it) is a monitoring step."""
        return step % self.config.interval_steps == 0

    def begin_step(self, step: int) -> None:
        if self.due(step):
            self.probe.arm()

    def note_divergence(self, divergence_sq: float, param_sq_norm: float) -> None:
        """A model average measured this replica's |theta_w - mean|^2 and |mean|^2."""
        self._divergence = (divergence_sq, param_sq_norm)

    def exchange(self, step: int, local_batch: float) -> Snapshot | None:
        """On monitoring steps: the one all-gather, and the snapshot every rank agrees on."""
        if not self.due(step):
            return None
        row = self._row(self.probe.disarm(), local_batch)
        world = dist.get_world_size()
        gathered = torch.empty(world * len(ROW_FIELDS), dtype=torch.float64, device=self.device)
        dist.all_gather_single(gathered, row)
        rows = gathered.view(world, len(ROW_FIELDS)).cpu().tolist()
        snapshot, self.noise = summarize(rows, step, self.noise)
        self._times, self._divergence = [0.0, 0.0, 0.0], (NAN, NAN)
        return snapshot

    def record_time(self, phases: dict[str, float]) -> None:
        self._times[0] += sum(phases.values())
        self._times[1] += sum(phases.get(p, 0.0) for p in COMPUTE_PHASES)
        self._times[2] += 1

    def _row(self, reading: ProbeReading | None, local_batch: float) -> torch.Tensor:
        step_s, compute_s, steps = self._times
        divergence_sq, param_sq = self._divergence
        if self.params is not None:
            with torch.no_grad():
                param_sq = float(sq_norm(self.params))
        rest = [
            local_batch,
            step_s / steps if steps else NAN,
            compute_s / steps if steps else NAN,
            divergence_sq,
            param_sq,
        ]
        tail = torch.tensor(rest, dtype=torch.float64, device=self.device)
        if reading is None:
            head = torch.full((2,), NAN, dtype=torch.float64, device=self.device)
        else:
            head = torch.stack([reading.local_sq_norm, reading.mean_sq_norm])
        return torch.cat([head, tail])
