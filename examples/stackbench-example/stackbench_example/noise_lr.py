"""An adaptive policy: halve the learning rate while the gradient noise scale exceeds the
global batch (the batch averages out less noise than there is: smaller steps instead of the
larger batch the built-in `batch` policy takes), down to 1/16 of the schedule's LR
(noise_lr_policy.py decides; it imports torch, so it is imported to build only).

It owns the knob `lr_factor` (the classification loop multiplies each step's LR by it), so
it cannot run beside policy=batch, which owns it too. This module is torch-free: the
runner reads it to list and check policies.
"""

from __future__ import annotations

from typing import Any

from workloads.adaptive.policies import Knobs, PolicyContext, PolicySpec
from workloads.plugins import points


def build(ctx: PolicyContext) -> tuple[Any, Knobs]:
    from stackbench_example.noise_lr_policy import NoiseLrPolicy

    policy = NoiseLrPolicy(ctx.base_global_batch, ctx.adaptive.batch_cooldown_steps)
    return policy, {"lr_factor": 1.0}


NOISE_LR = points.POLICIES.register(
    PolicySpec("noise-lr", ("lr_factor",), build, "halve the LR while B_noise > the batch")
)
