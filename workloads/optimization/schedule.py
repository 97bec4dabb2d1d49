"""Learning-rate schedules: their configs, and the LR as a pure function of training progress.

Four schedules (SCHEDULES, selected by the key `lr_schedule`), each peaking at `lr` (one
worker's) scaled to the number of workers by `lr_scaling`:
- "multistep" (tasks 1a, 3a): linear-scaling warm-up, then x lr_gamma at each milestone epoch
  (no milestones: a constant LR);
- "inverse-sqrt" (task 2a): alpha / sqrt(t), with alpha from a per-worker-count table;
- "warmup-inverse-sqrt" (task 4b, fairseq's inverse_sqrt): linear warm-up over warmup_steps
  updates, then peak * sqrt(warmup_steps / t);
- "warmup-step-decay" (task 4a, the MLPerf GNMT reference): exponential warm-up from 1% over
  warmup_steps updates, then x lr_gamma lr_decay_count times, the first at lr_decay_start of
  training and the rest evenly spaced over what remains.
`lr_plan` says what the scaling did (base lr, rule, peak) for the dry run, the run banner
and the MLPerf log. No optimizer here: the loop sets the value on the optimizer each step.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Literal

from workloads.configuration.components import Choice, Component
from workloads.configuration.fields import ConfigError, setting
from workloads.plugins import points

MAX_LR = 1000.0  # 2a's alpha is 200 for one worker (800 at 16); beyond this is a typo


@dataclass(frozen=True, kw_only=True)
class ScheduleConfig(Component):
    name: str  # each schedule narrows it to its Literal: the key `lr_schedule`
    lr: float = setting(gt=0, le=MAX_LR)  # one worker's; see lr_scaling for more workers
    # "linear": lr * workers (Goyal et al.); "sqrt": lr * sqrt(workers) (AWD-LSTM's);
    # "table": lr * lr_scale_table[i] at 2**i workers; "none": lr at any worker count.
    lr_scaling: Literal["none", "linear", "sqrt", "table"] = "none"
    lr_scale_table: tuple[float, ...] = setting((), gt=0, le=MAX_LR)

    def validate(self) -> None:
        if (self.lr_scaling == "table") != bool(self.lr_scale_table):
            raise ConfigError(
                "lr_scale_table",
                "give it (multipliers at 1, 2, 4, ... workers) iff lr_scaling=table",
            )

    def check_run(self, max_epochs: int) -> None:
        """Rules against the run's length (raise ConfigError naming the key)."""

    def lr_at(self, world_size: int, epochs_done: float, steps_done: int, max_epochs: int) -> float:
        """The LR for the step after `epochs_done` (fractional) epochs, `steps_done` steps."""
        raise NotImplementedError

    def warmup(self) -> str:
        """How the LR reaches its peak, in words ("" when it starts there)."""
        return ""


@dataclass(frozen=True, kw_only=True)
class MultiStep(ScheduleConfig):
    """With linear scaling, the LR ramps linearly from `lr` (one worker's) to the peak over
    `warmup_epochs` (Goyal et al. 2017); then it is multiplied by `lr_gamma` once for every
    milestone reached (epochs_done >= milestone, as MultiStepLR stepped per epoch). A run
    shorter than its warm-up (`--set max_epochs=1`, a quick check) ends on the ramp: the
    benchmark's warm-up is what its full runs need, and a check is no reason to refuse it."""

    name: Literal["multistep"] = "multistep"
    warmup_epochs: float = setting(0.0, ge=0, le=100_000)
    lr_milestones: tuple[int, ...] = setting((), ge=1, le=100_000)  # epochs
    lr_gamma: float = setting(0.1, gt=0, le=1)

    def validate(self) -> None:
        super().validate()
        if list(self.lr_milestones) != sorted(set(self.lr_milestones)):
            raise ConfigError("lr_milestones", "must be strictly increasing epochs")

    def lr_at(self, world_size: int, epochs_done: float, steps_done: int, max_epochs: int) -> float:
        peak = peak_lr(self, world_size)
        if epochs_done < self.warmup_epochs:
            return self.lr + (peak - self.lr) * epochs_done / self.warmup_epochs
        return peak * self.lr_gamma ** bisect_right(self.lr_milestones, epochs_done)

    def warmup(self) -> str:
        if not self.warmup_epochs:
            return ""
        plural = "" if self.warmup_epochs == 1 else "s"
        return f"ramped linearly from lr over {self.warmup_epochs:g} epoch{plural}"


@dataclass(frozen=True, kw_only=True)
class InverseSqrt(ScheduleConfig):
    """alpha / sqrt(t), t the 1-based step (MLBench's logistic-regression schedule)."""

    name: Literal["inverse-sqrt"] = "inverse-sqrt"

    def lr_at(self, world_size: int, epochs_done: float, steps_done: int, max_epochs: int) -> float:
        return inverse_sqrt_lr(peak_lr(self, world_size), steps_done + 1)


@dataclass(frozen=True, kw_only=True)
class WarmupInverseSqrt(ScheduleConfig):
    name: Literal["warmup-inverse-sqrt"] = "warmup-inverse-sqrt"
    warmup_steps: int = setting(ge=1, le=10**8)  # optimizer updates

    def lr_at(self, world_size: int, epochs_done: float, steps_done: int, max_epochs: int) -> float:
        return warmup_inverse_sqrt_lr(peak_lr(self, world_size), steps_done + 1, self.warmup_steps)

    def warmup(self) -> str:
        return f"linear warm-up over {self.warmup_steps} updates"


@dataclass(frozen=True, kw_only=True)
class WarmupStepDecay(ScheduleConfig):
    name: Literal["warmup-step-decay"] = "warmup-step-decay"
    warmup_steps: int = setting(ge=0, le=10**8)  # optimizer updates
    lr_gamma: float = setting(gt=0, le=1)
    lr_decay_start: float = setting(ge=0, lt=1)  # the first decay, as a fraction of training
    lr_decay_count: int = setting(ge=1, le=1000)  # decays, evenly spaced from there to the end

    def lr_at(self, world_size: int, epochs_done: float, steps_done: int, max_epochs: int) -> float:
        return warmup_step_decay_lr(
            self, peak_lr(self, world_size), epochs_done / max_epochs, steps_done
        )

    def warmup(self) -> str:
        return f"exponential warm-up over {self.warmup_steps} updates" if self.warmup_steps else ""


for _option in (MultiStep, InverseSqrt, WarmupInverseSqrt, WarmupStepDecay):
    points.SCHEDULES.register(_option)
SCHEDULES = Choice("lr_schedule", points.SCHEDULES, ScheduleConfig)


@dataclass(frozen=True)
class LrPlan:
    """What the scaling rule made of the base LR on `world_size` workers."""

    base_lr: float  # one worker's, as configured
    rule: str  # "linear x 2 workers"
    peak_lr: float  # what the schedule peaks at (after any warm-up)
    warmup: str = ""  # how it gets there ("" when it starts at the peak)

    def __str__(self) -> str:
        ramp = f", {self.warmup}" if self.warmup else ""
        return f"lr {self.base_lr:g} -> {self.peak_lr:g} ({self.rule}{ramp})"


def _workers(n: int) -> str:
    return "worker" if n == 1 else "workers"


def lr_plan(schedule: ScheduleConfig, world_size: int) -> LrPlan:
    """The base LR, the scaling rule applied at `world_size` workers, and the peak LR."""
    scaling = schedule.lr_scaling
    if scaling == "linear":
        rule = f"linear x {world_size} {_workers(world_size)}"
    elif scaling == "sqrt":
        rule = f"sqrt x sqrt({world_size} {_workers(world_size)})"
    elif scaling == "table":
        multiplier = table_multiplier(schedule.lr_scale_table, world_size)
        rule = f"table x {multiplier:g} at {world_size} {_workers(world_size)}"
    else:
        rule = "none: the same at any worker count"
    return LrPlan(schedule.lr, rule, peak_lr(schedule, world_size), schedule.warmup())


def peak_lr(schedule: ScheduleConfig, world_size: int) -> float:
    """`lr` (one worker's) scaled to `world_size` workers as lr_scaling says."""
    if schedule.lr_scaling == "linear":
        return schedule.lr * world_size
    if schedule.lr_scaling == "sqrt":  # AWD-LSTM's 15 * sqrt(k) (docs/benchmarks.md 3a)
        return schedule.lr * math.sqrt(world_size)
    if schedule.lr_scaling == "table":
        return schedule.lr * table_multiplier(schedule.lr_scale_table, world_size)
    return schedule.lr


def table_multiplier(table: tuple[float, ...], world_size: int) -> float:
    """table[i] is the multiplier at 2**i workers. A count between two entries takes the
    lower one (the conservative LR); beyond the table, the last entry holds."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    index = world_size.bit_length() - 1  # floor(log2(world_size))
    return table[min(index, len(table) - 1)]


def inverse_sqrt_lr(alpha: float, step: int) -> float:
    """alpha / sqrt(step), `step` counted from 1."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    return alpha / math.sqrt(step)


def warmup_inverse_sqrt_lr(peak: float, step: int, warmup_steps: int) -> float:
    """peak * step / warmup during warm-up, then peak * sqrt(warmup / step); `step` from 1."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    return peak * min(step / warmup_steps, math.sqrt(warmup_steps / step))


WARMUP_START_FACTOR = 0.01  # the GNMT reference's exponential warm-up starts at 1% of the LR


def warmup_step_decay_lr(
    schedule: WarmupStepDecay, peak: float, progress: float, steps_done: int
) -> float:
    """Exponential warm-up over warmup_steps updates, then step decays by training progress
    (the fraction of max_epochs done), as the MLPerf GNMT reference's WarmupMultiStepLR."""
    if steps_done < schedule.warmup_steps:
        return peak * WARMUP_START_FACTOR ** (
            (schedule.warmup_steps - steps_done) / schedule.warmup_steps
        )
    if progress < schedule.lr_decay_start:
        return peak
    interval = (1.0 - schedule.lr_decay_start) / schedule.lr_decay_count
    decays = min(schedule.lr_decay_count, 1 + int((progress - schedule.lr_decay_start) / interval))
    return peak * schedule.lr_gamma**decays
