"""Adaptive batch size: the global batch grows with the gradient noise scale, within bounds.

The rule. McCandlish et al. (2018) show that the critical batch size, beyond which a bigger
batch stops saving steps, is close to the simple noise scale B_noise, and that B_noise grows
as training progresses; the KungFu paper (Mai et al., OSDI 2020) grows the batch as the
monitored noise scale grows. So the policy keeps the global batch B at or below B_noise:
whenever the smoothed B_noise reaches `growth` times the current B (or more), B is
multiplied by the largest power of `growth` that stays at or below B_noise, capped at
`max_global_batch` and rounded down to a multiple of the world size (every worker takes
B / W samples). The batch never shrinks: a falling estimate is as often noise as signal,
and a monotone batch schedule is the one Smith et al. 2018 study ("Don't decay the learning
rate, increase the batch size"). A change waits `cooldown_steps` after the previous one, so
the EMAs see the new batch, and the first waits until the EMAs have taken `min_readings`
estimates (run.py: their memory, 1/(1 - decay) for their decay per reading: about 100
steps of training by default, at any monitoring interval, config.reading_decay): an EMA that
starts at its first value holds little else before that, and the first estimates of a
fresh model are the noisiest (ResNet-20 on generated CIFAR-format data read B_noise near 10^4
in its first readings and about 40 by its third epoch). Even then it reads the median of the
last 5 smoothed estimates taken since the batch last changed (evidence.py), never one.

The learning-rate rule, stated: the LR follows the global batch relative to the batch it was
tuned at, B0 (the run's starting global batch): factor = B/B0 ("linear", Goyal et al. 2017,
for SGD) or sqrt(B/B0) ("sqrt", Krizhevsky 2014 / Hoffer et al. 2017, usual for Adam), or
1 ("none"). The factor multiplies the schedule's LR at B0, so warm-up and decay still apply.

Mechanism: a decision changes the knobs "global_batch" and "lr_factor"; the loop draws the
next step from sampler.Cursor with the new B (the epoch's remainder is re-sharded) and
multiplies the LR by the factor. Not here: measuring B_noise (monitors.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from workloads.adaptive.config import LrRule, bounded_start, fit_to_world, lr_factor
from workloads.adaptive.evidence import Evidence, EvidenceConfig
from workloads.adaptive.policy import Hook, Knob, Proposal, View

__all__ = ["LrRule", "fit_to_world", "lr_factor"]  # defined in config.py (torch-free)


def grown_batch(
    current: int, b_noise: float, world_size: int, max_global_batch: int, growth: float
) -> int | None:
    """The global batch after growing towards B_noise, or None when it stays."""
    if b_noise < current * growth or current >= max_global_batch:
        return None
    powers = math.floor(math.log(b_noise / current, growth) + 1e-9)
    target = min(max_global_batch, int(current * growth**powers))
    new = fit_to_world(target, world_size)
    return new if new > current else None


@dataclass(frozen=True)
class AdaptiveBatchConfig:
    min_global_batch: int
    max_global_batch: int
    growth: float = 2.0
    lr_rule: LrRule = "linear"
    cooldown_steps: int = 0
    min_readings: int = 0  # noise-scale estimates the EMAs must hold before a first change

    def __post_init__(self) -> None:
        if not 1 <= self.min_global_batch <= self.max_global_batch:
            raise ValueError(
                f"need 1 <= min_global_batch <= max_global_batch, got "
                f"{self.min_global_batch} and {self.max_global_batch}"
            )
        if self.growth <= 1.0:
            raise ValueError(f"growth must exceed 1, got {self.growth}")
        if self.cooldown_steps < 0:
            raise ValueError(f"cooldown_steps must not be negative, got {self.cooldown_steps}")

    def start(self, global_batch: int, world_size: int) -> int:
        """The run's first global batch: the configured one within the bounds, fitted to W."""
        return bounded_start(global_batch, self.min_global_batch, self.max_global_batch, world_size)


class AdaptiveBatchPolicy:
    """Decides after monitoring steps, from the agreed B_noise; knobs global_batch, lr_factor.

    It acts on evidence (evidence.py): the median of the last smoothed B_noise readings taken
    since the batch last changed, never on one reading."""

    name = "adaptive-batch"
    knobs = (Knob("global_batch", integral=True), Knob("lr_factor"))
    hooks: tuple[Hook, ...] = ("after_step",)

    def __init__(
        self,
        config: AdaptiveBatchConfig,
        base_global_batch: int,
        evidence: EvidenceConfig | None = None,
    ) -> None:
        self.config = config
        self.base_global_batch = base_global_batch
        self._evidence = Evidence("b_noise", evidence or EvidenceConfig())

    def propose(self, hook: Hook, view: View) -> Sequence[Proposal]:
        snapshot = view.snapshot
        if snapshot is None:
            return ()
        last = view.last_change.get("global_batch")
        ready = snapshot.noise_readings >= self.config.min_readings
        self._evidence.observe(snapshot.b_noise if ready else None, last)
        b_noise = self._evidence.value
        if b_noise is None:
            return ()
        if last is not None and view.step - last < self.config.cooldown_steps:
            return ()
        current = int(view.knobs["global_batch"])
        new = grown_batch(
            current, b_noise, snapshot.world_size, self.config.max_global_batch, self.config.growth
        )
        if new is None:
            return ()
        factor = lr_factor(self.config.lr_rule, new, self.base_global_batch)
        why = f"median B_noise {b_noise:.1f} >= {self.config.growth:g} x global batch {current}"
        evidence = self._evidence.record(growth=self.config.growth)
        return (
            Proposal("global_batch", new, why, evidence),
            Proposal(
                "lr_factor", factor, f"{self.config.lr_rule} LR rule at batch {new}", evidence
            ),
        )
