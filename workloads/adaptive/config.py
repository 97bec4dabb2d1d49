"""The adaptive component of a TrainConfig: which policies a run follows, how often it
monitors, and each policy's bounds. Torch-free (the runner resolves it on its start-up path);
the mechanisms it configures are the modules beside it.

    --set policy=batch            the global batch grows with the gradient noise scale
    --set policy=sync             exact all-reduce or model averaging, by the replicas'
                                  divergence (with --set strategy=adaptive-sync)
    --set policy=batch,sync       both, in that order (the order decides what each one sees)
    --set monitor=true            the monitors alone, nothing decided (a baseline to compare)
    runner submit --workers 2:3   elastic workers (the range is the placement's, not a key)

Any policy or an elastic range makes a run open division (runner/job/spec.py); monitoring
alone changes no number a run trains with, only its time, and is open division too because a
closed-division time must not carry another run's instruments. `policy=none` is the empty list.
Not here: the rules between this component and the others (workloads/configuration/train_config.py
validates them: which task, data and strategy a policy works with).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from workloads.configuration.components import Component
from workloads.configuration.fields import ConfigError, setting
from workloads.plugins import points

# "none" alone is the empty list (a sweep's fixed baseline: --set policy=none,batch). The
# other names are the policies registered (workloads/adaptive/policies.py, plugins).
LrRule = Literal["linear", "sqrt", "none"]
NONE = "none"
# max_global_batch when not set: this many times the run's starting global batch.
DEFAULT_MAX_BATCH_FACTOR = 16


@dataclass(frozen=True, kw_only=True)
class AdaptiveConfig(Component):
    # Policies in the order they decide (each sees its predecessors' proposals).
    policy: tuple[str, ...] = ()
    # The monitors without a policy: the noise scale, variance and step times as events.
    monitor: bool = False
    monitor_interval_steps: int = setting(10, ge=1, le=1_000_000)
    # KungFu's default for both EMAs, per EMA_STEPS steps of training (reading_decay).
    noise_ema_decay: float = setting(0.9, ge=0, lt=1)
    # policy=batch: the global batch (samples over all workers) stays within these bounds;
    # None: the run's starting global batch (min) and DEFAULT_MAX_BATCH_FACTOR times it (max).
    min_global_batch: int | None = setting(None, ge=1, le=2**24)
    max_global_batch: int | None = setting(None, ge=1, le=2**24)
    batch_growth: float = setting(2.0, gt=1, le=1024)  # B grows by powers of this
    batch_lr_rule: LrRule = "linear"  # the LR follows B/B0: linearly, by its root, or not
    batch_cooldown_steps: int = setting(0, ge=0, le=10**9)  # between two changes of B
    # policy=sync: the replicas' relative divergence bounds and the averaging period's range.
    sync_low: float = setting(1e-5, gt=0, le=1)
    sync_high: float = setting(1e-4, gt=0, le=1)
    sync_min_period: int = setting(2, ge=2, le=1_000_000)
    sync_max_period: int = setting(64, ge=2, le=1_000_000)
    # Elastic runs (--workers MIN:MAX): a worker whose heartbeat is still this long is gone.
    heartbeat_s: float = setting(0.5, gt=0, le=60)
    dead_after_s: float = setting(5.0, gt=0, le=3600)

    def __post_init__(self) -> None:
        if self.policy == (NONE,):
            object.__setattr__(self, "policy", ())
        super().__post_init__()

    def validate(self) -> None:
        if NONE in self.policy:
            raise ConfigError("policy", "none stands alone: it is the empty list of policies")
        known = points.POLICIES.names() if self.policy else []
        for name in self.policy:
            if name not in known:
                raise ConfigError("policy", f"expected none or {', '.join(known)}, got {name!r}")
        if len(set(self.policy)) != len(self.policy):
            raise ConfigError("policy", f"names a policy twice: {','.join(self.policy)}")
        if (
            self.min_global_batch is not None
            and self.max_global_batch is not None
            and self.min_global_batch > self.max_global_batch
        ):
            raise ConfigError("max_global_batch", "must be at least min_global_batch")
        if self.sync_low >= self.sync_high:
            raise ConfigError("sync_high", f"must exceed sync_low={self.sync_low:g}")
        if self.sync_min_period > self.sync_max_period:
            raise ConfigError("sync_max_period", "must be at least sync_min_period")
        if self.dead_after_s <= 2 * self.heartbeat_s:
            raise ConfigError("dead_after_s", "must exceed two heartbeat periods (heartbeat_s)")

    @property
    def monitored(self) -> bool:
        """Whether the monitors run (every policy here reads them)."""
        return self.monitor or bool(self.policy)

    def batch_bounds(self, start_global_batch: int) -> tuple[int, int]:
        """(min, max) global batch for a run that starts at `start_global_batch`. The default
        min never exceeds a max set below the start: the run then starts at that max, as it
        starts at a min set above the start (AdaptiveBatchConfig.start)."""
        low = self.min_global_batch or min(
            start_global_batch, self.max_global_batch or start_global_batch
        )
        high = self.max_global_batch or max(low, DEFAULT_MAX_BATCH_FACTOR * start_global_batch)
        return low, high

    def start_global_batch(self, global_batch: int, world_size: int) -> int:
        """The global batch the run's first step trains at, for a run configured with
        `global_batch` on `world_size` workers: that one, or under policy=batch the one its
        bounds allow (a max set below it caps the start), fitted to the workers. What the
        run's record states as its global batch (workloads/telemetry/summary.py), never the
        unbounded configured one."""
        if "batch" not in self.policy:
            return global_batch
        low, high = self.batch_bounds(global_batch)
        return bounded_start(global_batch, low, high, world_size)

    def start_lr_factor(self, global_batch: int, world_size: int) -> float:
        """The LR multiplier of the run's first step: 1, or under policy=batch its rule's
        factor for a start the bounds moved off the configured `global_batch`."""
        if "batch" not in self.policy:
            return 1.0
        start = self.start_global_batch(global_batch, world_size)
        return lr_factor(self.batch_lr_rule, start, global_batch)

    def knobs(self) -> tuple[str, ...]:
        """The knobs the policies own, in order (what a run's summary reports)."""
        return tuple(k for p in self.policy for k in points.POLICIES.get(p).knobs)


# The steps of training over which noise_ema_decay applies once: one reading at the default
# monitor_interval_steps, so the defaults read as KungFu's EMA of 0.9 per reading.
EMA_STEPS = 10


def reading_decay(decay: float, interval_steps: int) -> float:
    """The decay of the noise-scale EMAs per reading, for readings `interval_steps` apart:
    decay ** (interval / EMA_STEPS). The EMAs then remember the same span of training, about
    EMA_STEPS / (1 - decay) steps, at any interval. Applied per reading whatever the
    interval, one decay made an interval of 100 smooth over 1,000 steps of training and an
    interval of 1 over 10: as the gradients shrink through training, the same run read a
    B_noise of 33, 103 and 5,440 at step 400 at intervals 100, 10 and 1, and the batch
    policy would grow the batch by the monitoring interval, which should set only its cost."""
    return float(decay ** (interval_steps / EMA_STEPS))


def fit_to_world(global_batch: int, world_size: int) -> int:
    """The largest multiple of the world size not above B, and at least one sample a worker."""
    return max(world_size, global_batch - global_batch % world_size)


def lr_factor(rule: LrRule, global_batch: int, base_global_batch: int) -> float:
    """The LR multiplier at global batch B for an LR tuned at B0 (adaptive/batch.py)."""
    ratio = global_batch / base_global_batch
    if rule == "linear":
        return ratio
    if rule == "sqrt":
        return math.sqrt(ratio)
    if rule == "none":
        return 1.0
    raise ValueError(f"unknown LR rule {rule!r}")


def bounded_start(global_batch: int, low: int, high: int, world_size: int) -> int:
    """The first global batch of a batch policy bounded by [low, high], fitted to W."""
    return fit_to_world(min(high, max(low, global_batch)), world_size)
