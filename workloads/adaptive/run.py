"""One run's adaptive machinery, built from its config: the monitor, the policies in their
Controller, where the epoch stands, and what the run reports about them.

training/run.py builds an `Adaptive` before the task (the strategy's exchange is probed by its
monitor, so the monitor must exist first) and hands it to the task through tasks.Context;
the classification task drives it step by step (training.py). It emits its records as
events through `emit` (rank 0's event log; nothing on the other ranks), after the step they
belong to has finished, so writing them is never inside a step's clock:

    stackbench_monitors  one per monitoring step: Snapshot.to_event(), plus the step's global
                         batch, the samples it trained on (fewer at an epoch's end), its LR
                         and the knobs' values
    stackbench_decision  one per agreed change: Decision.to_event()

Not here: the step itself (training.py), the mechanisms (the modules beside this one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from contract.events import DECISION, MONITORS
from contract.summary import AdaptiveSummary
from workloads.adaptive.batch import fit_to_world
from workloads.adaptive.monitors import Monitor, MonitorConfig, Snapshot
from workloads.adaptive.policies import PolicyContext
from workloads.adaptive.policy import (
    Agreement,
    Controller,
    Decision,
    KnobValue,
    Policy,
    RankZeroDecides,
    SingleProcess,
)
from workloads.adaptive.sampler import Cursor
from workloads.plugins import points

if TYPE_CHECKING:
    from workloads.adaptive.elastic.session import ElasticSession
    from workloads.configuration.train_config import TrainConfig
    from workloads.training.loop import Trainer

Emit = Callable[[str, Any], Any]


@dataclass
class Adaptive:
    """The adaptive state of one rank (identical on every rank, but for the clocks)."""

    config: TrainConfig
    controller: Controller
    monitor: Monitor | None
    base_global_batch: int  # B0: the global batch the LR schedule was tuned at
    initial_world: int  # the LR schedule's worker count (an elastic world moves; it does not)
    emit: Emit
    cursor: Cursor = field(default_factory=lambda: Cursor(0))
    steps_done: int = 0  # optimizer steps over the whole run
    run_start_s: float = 0.0  # on perf_counter: decisions' times count from here (start())
    # What it drives, once the task has built it (training.attach); an elastic change
    # replaces it with one on the new group.
    trainer: Trainer = field(init=False)
    world_size: int = 1  # the trainer's (attach sets it), kept after the task drops its trainer
    elastic: ElasticSession | None = None
    _pending: list[tuple[str, Any]] = field(default_factory=list)

    def start(self, run_start_s: float) -> None:
        """The run's clock started (run_start) at `run_start_s` on time.perf_counter."""
        self.run_start_s = run_start_s

    def seconds_since_start(self) -> float:
        return time.perf_counter() - self.run_start_s

    @property
    def global_batch(self) -> int:
        """The global batch the policies want (fitted to the world when drawn)."""
        return int(self.controller.values.get("global_batch", self.base_global_batch))

    @property
    def lr_factor(self) -> float:
        return float(self.controller.values.get("lr_factor", 1.0))

    def record_snapshot(
        self, snapshot: Snapshot, global_batch: int, samples: int, lr: float
    ) -> None:
        """The step's snapshot, with its global batch (the epoch's last step may train on
        fewer `samples`), its LR and the knobs' values."""
        extra = {"global_batch": global_batch, "samples": samples, "lr": lr,
                 "knobs": dict(self.controller.values)}  # fmt: skip
        self._pending.append((MONITORS, snapshot.to_event() | extra))

    def record_decisions(self, decisions: list[Decision]) -> None:
        self._pending += [(DECISION, d.to_event()) for d in decisions]

    def flush(self) -> None:
        """Emit what the last step recorded (call after its clock has stopped)."""
        for key, value in self._pending:
            self.emit(key, value)
        self._pending.clear()

    def summary(self) -> AdaptiveSummary:
        """What the run's summary says about its policies (contract/summary.py)."""
        decisions = self.controller.decisions
        b_noise = self.monitor.noise.b_noise if self.monitor is not None else None
        return AdaptiveSummary(
            policies=tuple(self.config.adaptive.policy),
            monitor_interval_steps=self.config.adaptive.monitor_interval_steps,
            decisions=len(decisions),
            decisions_by_knob=_count_by_knob(decisions),
            final=self.final_knobs(),
            # JSON has no NaN: an estimate not yet made (or not finite) is None.
            b_noise=b_noise if b_noise is not None and math.isfinite(b_noise) else None,
        )

    def final_knobs(self) -> dict[str, KnobValue]:
        """The knobs at the run's end, the global batch as its last steps trained at it: the
        knob is what the policy wants, and each step draws it fitted to the world (an
        elastic world that shrank from 3 to 2 workers trains a knob of 15 at 14)."""
        final = dict(self.controller.values)
        if "global_batch" in final:
            final["global_batch"] = fit_to_world(int(final["global_batch"]), self.world_size)
        return final


def build(
    config: TrainConfig,
    world_size: int,
    device: torch.device,
    emit: Emit,
    extra: tuple[tuple[Policy, dict[str, KnobValue]], ...] = (),
) -> Adaptive | None:
    """The run's adaptive machinery, or None when it has neither policy nor monitor.
    `extra`: policies the run adds itself, first (the elastic group's), with their knobs."""
    adaptive = config.adaptive
    if not adaptive.monitored and not extra:
        return None
    base = config.data.batch_size * world_size
    monitor_config = MonitorConfig(adaptive.monitor_interval_steps, adaptive.noise_ema_decay)
    policies: list[Policy] = [p for p, _ in extra]
    initial: dict[str, KnobValue] = {k: v for _, knobs in extra for k, v in knobs.items()}
    ctx = PolicyContext(adaptive, config.optimizer, base, world_size, monitor_config.reading_decay)
    for name in adaptive.policy:  # ours and plugins' alike (workloads/adaptive/policies.py)
        policy, knobs = points.POLICIES.get(name).build(ctx)
        policies.append(policy)
        initial |= knobs
    monitor = None
    if adaptive.monitored:
        monitor = Monitor(monitor_config, device)
    agreement: Agreement = RankZeroDecides(device) if world_size > 1 or extra else SingleProcess()
    clock = _Clock()
    controller = Controller(policies, initial, agreement, adaptive.monitor_interval_steps, clock)
    run = Adaptive(config, controller, monitor, base, world_size, emit)
    clock.run = run
    return run


class _Clock:
    """A decision's time: seconds since the run's start, once the run knows it."""

    run: Adaptive | None = None

    def __call__(self) -> float:
        return self.run.seconds_since_start() if self.run is not None else 0.0


def _count_by_knob(decisions: list[Decision]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in decisions:
        counts[d.knob] = counts.get(d.knob, 0) + 1
    return counts
