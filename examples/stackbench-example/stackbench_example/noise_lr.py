"""An adaptive policy: halve the learning rate while the gradient noise scale exceeds the
global batch (the batch averages out less noise than there is: smaller steps instead of the
larger batch the built-in `batch` policy takes), down to 1/16 of the schedule's LR.

It owns the knob `lr_factor` (the classification loop multiplies each step's LR by it), so
it cannot run beside policy=batch, which owns it too. Torch-free: the monitors' snapshot
arrives as plain numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workloads.adaptive.policies import Knobs, PolicyContext, PolicySpec
from workloads.adaptive.policy import Hook, Knob, Proposal, View
from workloads.plugins import points

FACTOR = 0.5
MIN_LR_FACTOR = 1 / 16


class NoiseLrPolicy:
    name = "noise-lr"
    knobs = (Knob("lr_factor"),)
    hooks: tuple[Hook, ...] = ("after_step",)

    def __init__(self, global_batch: int, cooldown_steps: int) -> None:
        self.global_batch = global_batch
        self.cooldown_steps = cooldown_steps

    def propose(self, hook: Hook, view: View) -> Sequence[Proposal]:
        snapshot = view.snapshot
        if snapshot is None or snapshot.b_noise is None:
            return ()
        last = view.last_change.get("lr_factor")
        if last is not None and view.step - last < self.cooldown_steps:
            return ()
        current = float(view.knobs["lr_factor"])
        if snapshot.b_noise <= self.global_batch or current <= MIN_LR_FACTOR:
            return ()
        why = f"B_noise {snapshot.b_noise:.1f} > global batch {self.global_batch}"
        return (Proposal("lr_factor", max(MIN_LR_FACTOR, current * FACTOR), why),)


def build(ctx: PolicyContext) -> tuple[Any, Knobs]:
    policy = NoiseLrPolicy(ctx.base_global_batch, ctx.adaptive.batch_cooldown_steps)
    return policy, {"lr_factor": 1.0}


NOISE_LR = points.POLICIES.register(
    PolicySpec("noise-lr", ("lr_factor",), build, "halve the LR while B_noise > the batch")
)
