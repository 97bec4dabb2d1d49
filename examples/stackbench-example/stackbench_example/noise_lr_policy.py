"""The noise-lr policy's decisions (imports torch through workloads.adaptive.policy): see
noise_lr.py."""

from __future__ import annotations

from collections.abc import Sequence

from workloads.adaptive.policy import Hook, Knob, Proposal, View

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
