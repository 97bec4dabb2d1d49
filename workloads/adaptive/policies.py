"""The adaptive policies a run can name (`--set policy=batch,sync`): an extension point.

A policy registers a PolicySpec: its name, the knobs it owns, and `build(ctx)`, which makes
the policy (workloads/adaptive/policy.py's Policy protocol) and the knobs' initial values
from its own slice of the run's configuration, the PolicyContext, never the whole run
config. Ours register here as a plugin's do (workloads/plugins/points.py POLICIES); their
decision logic stays in batch.py and sync.py, imported only to build (they import torch).
Knobs the training loop applies: global_batch and lr_factor (the classification loop's
sampler and LR), sync_mode and averaging_period (the adaptive-sync strategy); each is owned
by one policy of a run (policy.Controller refuses two owners). Torch-free.
"""

from __future__ import annotations

import math
from typing import Any

from workloads.adaptive.spec import Knobs, PolicyContext, PolicySpec
from workloads.plugins import points

__all__ = ["Knobs", "PolicyContext", "PolicySpec", "ema_memory"]


def ema_memory(decay: float) -> int:
    """How many values an EMA of this decay (per value) averages over, about: 1/(1 - decay)."""
    return math.ceil(1.0 / (1.0 - decay) - 1e-9)


def _batch(ctx: PolicyContext) -> tuple[Any, Knobs]:
    from workloads.adaptive.batch import AdaptiveBatchConfig, AdaptiveBatchPolicy, lr_factor

    adaptive, base = ctx.adaptive, ctx.base_global_batch
    low, high = adaptive.batch_bounds(base)
    batch = AdaptiveBatchConfig(
        low, high, adaptive.batch_growth, adaptive.batch_lr_rule,
        adaptive.batch_cooldown_steps, ema_memory(ctx.reading_decay),
    )  # fmt: skip
    start = adaptive.start_global_batch(base, ctx.world_size)  # as the summary says
    knobs = {"global_batch": start, "lr_factor": lr_factor(batch.lr_rule, start, base)}
    return AdaptiveBatchPolicy(batch, base), knobs


def _sync(ctx: PolicyContext) -> tuple[Any, Knobs]:
    from workloads.adaptive.sync import AdaptiveSyncConfig, AdaptiveSyncPolicy

    adaptive = ctx.adaptive
    momentum = float(getattr(ctx.optimizer, "momentum", 0.0))  # SGD's; 0 for the others
    config = AdaptiveSyncConfig(
        adaptive.sync_low, adaptive.sync_high, adaptive.sync_min_period,
        adaptive.sync_max_period, momentum,
    )  # fmt: skip
    knobs = {"sync_mode": "exact", "averaging_period": adaptive.sync_min_period}
    return AdaptiveSyncPolicy(config), knobs


BATCH = points.POLICIES.register(
    PolicySpec(
        "batch",
        ("global_batch", "lr_factor"),
        _batch,
        "the global batch grows with the gradient noise scale",
    )
)
SYNC = points.POLICIES.register(
    PolicySpec(
        "sync",
        ("sync_mode", "averaging_period"),
        _sync,
        "exact all-reduce or model averaging, by the replicas' divergence",
    )
)
