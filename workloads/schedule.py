"""Learning-rate schedules as pure functions of training progress.

Four schedules (TrainConfig.lr_schedule), each scaled to the number of workers by
TrainConfig.lr_scaling:
- "multistep" (tasks 1a, 3a): linear-scaling warm-up, then x lr_gamma at each milestone epoch
  (no milestones: a constant LR);
- "inverse-sqrt" (task 2a): alpha / sqrt(t), with alpha from a per-worker-count table;
- "warmup-inverse-sqrt" (task 4b, fairseq's inverse_sqrt): linear warm-up over warmup_steps
  updates, then peak * sqrt(warmup_steps / t);
- "warmup-step-decay" (task 4a, the MLPerf GNMT reference): exponential warm-up from 1% over
  warmup_steps updates, then x lr_gamma lr_decay_count times, the first at lr_decay_start of
  training and the rest evenly spaced over what remains.
No optimizer here: the loop sets the value on the optimizer each step.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from workloads.config import TrainConfig


def lr_at(config: TrainConfig, world_size: int, epochs_done: float, steps_done: int = 0) -> float:
    """The LR for the step after `epochs_done` (fractional) epochs, `steps_done` steps."""
    if config.lr_schedule == "inverse-sqrt":
        return inverse_sqrt_lr(peak_lr(config, world_size), steps_done + 1)
    if config.lr_schedule == "warmup-inverse-sqrt":
        return warmup_inverse_sqrt_lr(
            peak_lr(config, world_size), steps_done + 1, config.warmup_steps
        )
    if config.lr_schedule == "warmup-step-decay":
        return warmup_step_decay_lr(config, peak_lr(config, world_size), epochs_done, steps_done)
    return multistep_lr(config, world_size, epochs_done)


def peak_lr(config: TrainConfig, world_size: int) -> float:
    """`lr` (one worker's) scaled to `world_size` workers as lr_scaling says."""
    if config.lr_scaling == "linear":
        return config.lr * world_size
    if config.lr_scaling == "sqrt":  # AWD-LSTM's 15 * sqrt(k) (shared/BENCHMARKS.md 3a)
        return config.lr * math.sqrt(world_size)
    if config.lr_scaling == "table":
        return config.lr * table_multiplier(config.lr_scale_table, world_size)
    return config.lr


def table_multiplier(table: tuple[float, ...], world_size: int) -> float:
    """table[i] is the multiplier at 2**i workers. A count between two entries takes the
    lower one (the conservative LR); beyond the table, the last entry holds."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    index = world_size.bit_length() - 1  # floor(log2(world_size))
    return table[min(index, len(table) - 1)]


def multistep_lr(config: TrainConfig, world_size: int, epochs_done: float) -> float:
    """With linear scaling, the LR ramps linearly from `lr` (one worker's) to `lr * world_size`
    over `warmup_epochs` (Goyal et al. 2017); then it is multiplied by `lr_gamma` once for
    every milestone already reached (epochs_done >= milestone, as MultiStepLR stepped per epoch).
    """
    peak = peak_lr(config, world_size)
    if epochs_done < config.warmup_epochs:
        return config.lr + (peak - config.lr) * epochs_done / config.warmup_epochs
    return peak * config.lr_gamma ** bisect_right(config.lr_milestones, epochs_done)


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
    config: TrainConfig, peak: float, epochs_done: float, steps_done: int
) -> float:
    """Exponential warm-up over warmup_steps updates, then step decays by training progress
    (epochs_done / max_epochs), as the MLPerf GNMT reference's WarmupMultiStepLR."""
    if steps_done < config.warmup_steps:
        return peak * WARMUP_START_FACTOR ** (
            (config.warmup_steps - steps_done) / config.warmup_steps
        )
    progress = epochs_done / config.max_epochs
    if progress < config.lr_decay_start:
        return peak
    interval = (1.0 - config.lr_decay_start) / config.lr_decay_count
    decays = min(config.lr_decay_count, 1 + int((progress - config.lr_decay_start) / interval))
    return peak * config.lr_gamma**decays
