"""Learning-rate schedules as pure functions of training progress."""

from __future__ import annotations

from bisect import bisect_right

from workloads.config import TrainConfig


def lr_at(config: TrainConfig, world_size: int, epochs_done: float) -> float:
    """The LR after `epochs_done` (fractional) epochs.

    With linear scaling, the LR ramps linearly from `lr` (one worker's) to `lr * world_size`
    over `warmup_epochs` (Goyal et al. 2017); then it is multiplied by `lr_gamma` once for
    every milestone already reached (epochs_done >= milestone, as MultiStepLR stepped per epoch).
    """
    peak = config.lr * world_size if config.lr_scaling == "linear" else config.lr
    if epochs_done < config.warmup_epochs:
        return config.lr + (peak - config.lr) * epochs_done / config.warmup_epochs
    return peak * config.lr_gamma ** bisect_right(config.lr_milestones, epochs_done)
