"""Adaptive synchronisation: exact gradient all-reduce or periodic model averaging, switched
while training by how far the replicas drift apart, with the averaging period adapting.

The statistic is the replicas' relative divergence at an average, r = mean_w |theta_w -
theta|^2 / |theta|^2 (theta the average), measured by the averaging itself at the cost of
one pass over the weights. Under averaging with period H: r above `high` halves H, and
when H would fall below `min_period` training switches to the exact all-reduce; r below
`low` doubles H up to `max_period`. Under the exact all-reduce the replicas are identical,
so r is predicted instead from the monitored gradient variance across workers V (noise.py):
H local steps of SGD from a common point move the replicas apart like a random walk,
    E mean_w |theta_w - theta|^2 ~ (lr/(1 - momentum))^2 H (W-1)/W V,
(the divergence term of local-SGD analyses: Stich 2019, "Local SGD converges fast and
communicates little"; Lin et al. 2018, "Don't use large mini-batches, use local SGD"), and
training switches to averaging at `min_period` when the prediction is below `low`. `low` <
`high` gives the switch hysteresis, and each statistic is the median of its last 5 readings
since the mode last changed (evidence.py), never one reading. KungFu switches between
synchronous SGD and synchronous model averaging at a fixed step (AdaptiveSGDOptimizer,
srcs/python/kungfu/tensorflow/optimizers/ada_sgd.py); here the step is chosen by the statistic.

Mechanism (`AdaptiveSyncStrategy`, a Strategy as in workloads/strategies/): exact mode
all-reduces the flattened gradients after backward (the `allreduce` strategy, through the
probe so the noise-scale monitor works); averaging mode steps locally and averages weights
and floating-point buffers every H steps (the `model-averaging` strategy). Switching back to
exact first averages the weights, buffers and the optimizer's per-parameter state (momentum,
Adam moments): identical weights with different momenta would drift apart again under
identical gradients. The all-reduce returns the same bytes on every rank, so the replicas are
bitwise identical from the switch on. Scalar optimizer state (Adam's step count) is equal
everywhere and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from workloads.adaptive.evidence import Evidence, EvidenceConfig
from workloads.adaptive.monitors import Snapshot
from workloads.adaptive.policy import Hook, Knob, Proposal, View
from workloads.adaptive.probes import GradientProbe, sq_norm
from workloads.optimization.sgd import Optimizer
from workloads.strategies.averaging import average_model
from workloads.strategies.base import (
    Collectives,
    LocalGradients,
    UsageCarrier,
    broadcast_state,
    flat_all_reduce_mean,
    trainable,
)
from workloads.telemetry.timing import StepTimer

SyncMode = Literal["exact", "averaging"]
SYNC_MODES: tuple[SyncMode, ...] = ("exact", "averaging")


@dataclass(frozen=True)
class AdaptiveSyncConfig:
    low: float = 1e-5  # relative divergence under which averaging loosens (or starts)
    high: float = 1e-4  # over which it tightens (or stops)
    min_period: int = 2
    max_period: int = 64
    momentum: float = 0.0  # the optimizer's, for the predicted divergence

    def __post_init__(self) -> None:
        if not 0.0 < self.low < self.high:
            raise ValueError(f"need 0 < low < high, got low={self.low}, high={self.high}")
        if not 2 <= self.min_period <= self.max_period:
            raise ValueError("need 2 <= min_period <= max_period")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")


@dataclass(frozen=True)
class SyncState:
    mode: SyncMode
    period: int  # averaging period in steps (kept, unused, in exact mode)


def predicted_divergence(
    lr: float, momentum: float, period: int, grad_variance: float, world: int, param_sq: float
) -> float:
    """The relative divergence H local steps would cause (the random-walk estimate above)."""
    step = lr / (1.0 - momentum)
    return step * step * period * (world - 1) / world * max(0.0, grad_variance) / param_sq


def next_sync(
    state: SyncState,
    divergence: float | None,
    predicted: float | None,
    config: AdaptiveSyncConfig,
) -> tuple[SyncState, str] | None:
    """The next mode and period, with the reason, or None to stay."""
    if state.mode == "averaging" and divergence is not None:
        if divergence > config.high:
            if state.period // 2 < config.min_period:
                return SyncState("exact", state.period), f"divergence {divergence:.2e} > high"
            return SyncState("averaging", state.period // 2), f"divergence {divergence:.2e} > high"
        if divergence < config.low and state.period < config.max_period:
            period = min(2 * state.period, config.max_period)
            return SyncState("averaging", period), f"divergence {divergence:.2e} < low"
    if state.mode == "exact" and predicted is not None and predicted < config.low:
        return (
            SyncState("averaging", config.min_period),
            f"predicted divergence {predicted:.2e} < low at period {config.min_period}",
        )
    return None


class AdaptiveSyncPolicy:
    """Decides after monitoring steps; knobs sync_mode and averaging_period.

    It acts on evidence (evidence.py), never on one reading: under averaging, the median of
    the last measured divergences; under exact training, the median of the last predicted
    ones, times a calibration. The calibration is what averaging showed the prediction to be
    worth: measured / predicted divergence at the period it ran (never below 1), so a
    prediction that proved 80 times too low once does not switch to averaging again at the
    same reading."""

    name = "adaptive-sync"
    knobs = (Knob("sync_mode", choices=SYNC_MODES), Knob("averaging_period", integral=True))
    hooks: tuple[Hook, ...] = ("after_step",)

    def __init__(self, config: AdaptiveSyncConfig, evidence: EvidenceConfig | None = None) -> None:
        self.config = config
        self._measured = Evidence("divergence", evidence or EvidenceConfig())
        self._predicted = Evidence("predicted_divergence", evidence or EvidenceConfig())
        self.calibration = 1.0
        self._predicted_at_switch: float | None = None  # per min_period, when averaging began

    def propose(self, hook: Hook, view: View) -> Sequence[Proposal]:
        snapshot = view.snapshot
        if snapshot is None:
            return ()
        mode: SyncMode = "averaging" if view.knobs["sync_mode"] == "averaging" else "exact"
        state = SyncState(mode, int(view.knobs["averaging_period"]))
        changed = max((view.last_change.get(k.name, -1) for k in self.knobs), default=-1)
        self._measured.observe(snapshot.divergence if mode == "averaging" else None, changed)
        self._predicted.observe(self._prediction(view, snapshot), changed)
        measured = self._measured.value if mode == "averaging" else None
        self._calibrate(state, measured)
        predicted = self._predicted.value
        calibrated = predicted * self.calibration if predicted is not None else None
        step = next_sync(state, measured, calibrated if mode == "exact" else None, self.config)
        if step is None:
            return ()
        new, reason = step
        used = self._measured if mode == "averaging" else self._predicted
        evidence = used.record(calibration=self.calibration, low=self.config.low,
                               high=self.config.high)  # fmt: skip
        if mode == "exact":
            self._predicted_at_switch = predicted
        return (
            Proposal("sync_mode", new.mode, reason, evidence),
            Proposal("averaging_period", new.period, reason, evidence),
        )

    def _prediction(self, view: View, snapshot: Snapshot) -> float | None:
        if snapshot.grad_variance is None or not snapshot.param_sq_norm:
            return None
        return predicted_divergence(
            view.lr,
            self.config.momentum,
            self.config.min_period,
            snapshot.grad_variance,
            snapshot.world_size,
            snapshot.param_sq_norm,
        )

    def _calibrate(self, state: SyncState, measured: float | None) -> None:
        """Once averaging's divergence is in evidence, what the prediction that started it was
        worth (the prediction grows linearly with the period)."""
        predicted = self._predicted_at_switch
        if measured is None or not predicted:
            return
        expected = predicted * state.period / self.config.min_period
        self.calibration = max(self.calibration, measured / expected)
        self._predicted_at_switch = None  # one calibration per stretch of averaging


class AdaptiveSyncStrategy(LocalGradients):
    """Exact all-reduce or model averaging, switchable between steps (see the docstring)."""

    def __init__(
        self,
        model: nn.Module,
        collectives: Collectives,
        state: SyncState,
        probe: GradientProbe | None = None,
        on_divergence: Callable[[float, float], None] | None = None,
    ) -> None:
        self.inner = self.module = model
        self.state = state
        self._collectives = collectives
        self._params = trainable(model)
        self._usage = UsageCarrier(self._params)  # exact mode: as one process (base.py)
        self._exchange = (
            probe.wrap_exchange(flat_all_reduce_mean) if probe else flat_all_reduce_mean
        )
        self._on_divergence = on_divergence
        self._local_steps = 0
        broadcast_state(model, collectives)

    def synchronize(self, timer: StepTimer) -> None:
        if self.syncing and self.state.mode == "exact":
            self._usage.exchange(self._exchange, self._collectives)
        timer.lap("communication")

    def after_step(self, timer: StepTimer) -> None:
        if self.state.mode != "averaging":
            return
        self._local_steps += 1
        if self._local_steps >= self.state.period:
            divergence_sq, mean_sq = average_measuring(self.inner, self._collectives)
            self._local_steps = 0
            if self._on_divergence is not None:
                self._on_divergence(divergence_sq, mean_sq)
            timer.lap("communication")

    def sync_buffers(self) -> None:
        average_model(self.inner, self._collectives)

    @property
    def local_steps(self) -> int:
        """Local steps since the last average (an elastic change hands it over)."""
        return self._local_steps

    def restore(self, state: SyncState, local_steps: int) -> None:
        """Take over another replica's mode, period and place in it (after an elastic
        change, every replica has just adopted the same weights)."""
        self.state, self._local_steps = state, local_steps

    def switch(self, state: SyncState, optimizer: Optimizer) -> None:
        """Apply an agreed change between steps; back to exact, the replicas become one."""
        if self.state.mode == "averaging" and state.mode == "exact":
            average_model(self.inner, self._collectives)
            average_optimizer_state(optimizer, self._collectives)
            self._local_steps = 0
        self.state = state


@torch.no_grad()
def average_measuring(model: nn.Module, collectives: Collectives) -> tuple[float, float]:
    """Average parameters and floating-point buffers over ranks (one all-reduce, as
    averaging.average_model); returns this replica's |theta_w - theta|^2 and |theta|^2 over
    the parameters, read between the all-reduce and the copy back."""
    params = [p.data for p in model.parameters()]
    state = params + [b for b in model.buffers() if b.is_floating_point()]
    flat = _flatten_dense_tensors(state)
    collectives.all_reduce_mean(flat)
    synced = _unflatten_dense_tensors(flat, state)
    mean_params = list(synced[: len(params)])
    divergence_sq = sq_norm(list(torch._foreach_sub(params, mean_params)))
    mean_sq = sq_norm(mean_params)
    for tensor, value in zip(state, synced, strict=True):
        tensor.copy_(value)
    return float(divergence_sq), float(mean_sq)


@torch.no_grad()
def average_optimizer_state(optimizer: Optimizer, collectives: Collectives) -> None:
    """The per-parameter floating-point state (momentum buffers, Adam moments) averaged."""
    _fill_missing_state(optimizer, collectives)
    tensors = [
        value
        for group in optimizer.param_groups
        for param in group["params"]
        for value in optimizer.state.get(param, {}).values()
        if torch.is_tensor(value) and value.is_floating_point() and value.shape == param.shape
    ]
    flat_all_reduce_mean(tensors, collectives)


@torch.no_grad()
def _fill_missing_state(optimizer: Optimizer, collectives: Collectives) -> None:
    """Fresh (zero) state for a parameter whose state another replica holds and this one does
    not: one that no rank used in exact mode has none anywhere (UsageCarrier), and one that
    only some replicas then used while averaging has it on those alone. The replicas then
    average the same tensors (a missing one counted as zeros, as a gradient is), where they
    gave the all-reduce buffers of different sizes. Zeros are what a fresh state starts from
    (SGD's first buffer is its gradient, Adam's moments and step start at 0)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params:
        return
    held = [bool(optimizer.state.get(p)) for p in params]
    anywhere = torch.tensor(held, dtype=torch.float32, device=params[0].device)
    collectives.all_reduce_mean(anywhere)
    template = next(((p, optimizer.state[p]) for p, h in zip(params, held, strict=True) if h), None)
    for p, mine, share in zip(params, held, anywhere.tolist(), strict=True):
        if mine or share == 0 or template is None:
            continue
        like, state = template
        optimizer.state[p] = {k: _zeros(v, p, like) for k, v in state.items()}


def _zeros(value: Any, param: torch.Tensor, like: torch.Tensor) -> Any:
    """`value` (of parameter `like`'s state) as the fresh state of `param`: zeros."""
    if not torch.is_tensor(value):
        return type(value)()
    if value.shape == like.shape:  # per element of the parameter (a buffer, a moment)
        return torch.zeros_like(param, dtype=value.dtype)
    return torch.zeros_like(value)  # a count (Adam's step)
