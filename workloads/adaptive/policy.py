"""Adaptive policies: decisions that every rank takes at the same step.

A policy owns named knobs (the global batch, the learning-rate factor, the synchronisation
mode, the number of workers) and, at a decision point, reads a View (the step, the LR, the
current knob values, the monitors' Snapshot) and proposes new values with a reason. Policies
are pure decision logic; applying a decision (a new sampler, a strategy switch) is the
mechanism's job (batch.py, sync.py, elastic/), and the loop's.

Agreement: a decision point holds exactly one collective. Rank 0's proposals, one float64
per knob (NaN: no change; a categorical knob by the index of its value), are broadcast, and
every rank applies the broadcast values at that step. So ranks agree even where their own
proposals would differ (a policy reading a rank-local clock or store), and a follower never
needs the reason: the Decision it records says "as rank 0 decided" unless it proposed the
same value itself. KungFu agrees on a change of communication strategy by a one-collective
vote instead (an all-reduce of each peer's yes/no and a majority: CheckInterference in
srcs/go/kungfu/session/adaptiveStrategies.go); a broadcast costs the same and carries values.

Composition: the Controller runs its policies in the order given; each sees the knob values
its predecessors proposed at the same decision point, and each knob belongs to exactly one
policy, so the order decides what a policy sees, never which of two proposals wins.
Decision points are the steps that are multiples of `interval_steps`: before the step
(`before_step`, for what the step itself must use) and after it (`after_step`, reading the
monitors the step gathered; applied from the next step). A hook that no policy uses holds no
collective.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
import torch.distributed as dist

from workloads.adaptive.monitors import Snapshot

KnobValue = int | float | str
Hook = Literal["before_step", "after_step"]
FOLLOWED = "as rank 0 decided"


@dataclass(frozen=True)
class Knob:
    """A value a policy may change; `choices` makes it categorical (encoded by index)."""

    name: str
    choices: tuple[str, ...] = ()
    integral: bool = False

    def encode(self, value: KnobValue) -> float:
        if self.choices:
            return float(self.choices.index(str(value)))
        return float(value)

    def decode(self, encoded: float) -> KnobValue:
        if self.choices:
            return self.choices[int(encoded)]
        return int(encoded) if self.integral else encoded


@dataclass(frozen=True)
class Proposal:
    knob: str
    value: KnobValue
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)  # what it read (evidence.py)


@dataclass(frozen=True)
class Decision:
    """One agreed change: at `step` (optimizer steps done), `knob` went from old to new."""

    step: int
    time_s: float  # since the run's start, on the rank that records it
    policy: str
    knob: str
    old: KnobValue
    new: KnobValue
    reason: str
    # Rank 0's evidence for its proposal (evidence.py): the statistic, its median and the
    # readings it was taken from; empty for a follower's copy or a recorded membership change.
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def agreed_part(self) -> tuple[int, str, KnobValue, KnobValue]:
        """What every rank must have identical (time and a follower's reason may differ)."""
        return (self.step, self.knob, self.old, self.new)

    def to_event(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "time_s": self.time_s,
            "policy": self.policy,
            "knob": self.knob,
            "old": self.old,
            "new": self.new,
            "reason": self.reason,
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True)
class View:
    """What a policy reads at a decision point."""

    step: int  # optimizer steps completed
    lr: float  # the learning rate the loop set for the step
    knobs: Mapping[str, KnobValue]
    snapshot: Snapshot | None = None  # after_step on a monitoring step only
    last_change: Mapping[str, int] = field(default_factory=dict)  # knob -> step of its last


class Policy(Protocol):
    name: str

    @property
    def knobs(self) -> tuple[Knob, ...]: ...  # read-only: a policy's tuple may be exact-length

    hooks: tuple[Hook, ...]  # which of before_step/after_step it decides in

    def propose(self, hook: Hook, view: View) -> Sequence[Proposal]: ...


class Agreement(Protocol):
    def agree(self, proposed: torch.Tensor) -> torch.Tensor:
        """Every rank's copy of the one agreed vector (a collective)."""
        ...


@dataclass(frozen=True)
class RankZeroDecides:
    """Rank 0's vector, broadcast: one collective per decision point."""

    device: torch.device

    def agree(self, proposed: torch.Tensor) -> torch.Tensor:
        agreed = proposed.to(self.device)
        dist.broadcast(agreed, 0)
        return agreed.cpu()


class SingleProcess:
    """A world of one agrees with itself: no collective."""

    def agree(self, proposed: torch.Tensor) -> torch.Tensor:
        return proposed


class Controller:
    """Runs policies in order at decision points and returns the agreed decisions."""

    def __init__(
        self,
        policies: Sequence[Policy],
        initial: Mapping[str, KnobValue],
        agreement: Agreement,
        interval_steps: int,
        clock_s: Callable[[], float],
    ) -> None:
        self.policies = tuple(policies)
        self._knobs = _owned_knobs(self.policies)
        missing = sorted(set(self._knobs) - set(initial))
        if missing:
            raise ValueError(f"no initial value for knob(s) {', '.join(missing)}")
        if interval_steps < 1:
            raise ValueError(f"interval_steps must be at least 1, got {interval_steps}")
        self.values: dict[str, KnobValue] = {k: initial[k] for k in self._knobs}
        self.last_change: dict[str, int] = {}
        self.decisions: list[Decision] = []
        self._agreement, self._interval, self._clock_s = agreement, interval_steps, clock_s

    def due(self, step: int) -> bool:
        return step % self._interval == 0

    def before_step(self, step: int, lr: float) -> list[Decision]:
        """Decisions for step `step` itself (the step's data is drawn after them)."""
        return self._decide("before_step", step, lr, None)

    def after_step(self, step: int, lr: float, snapshot: Snapshot | None) -> list[Decision]:
        """Decisions from the step's monitors, in force from the next step."""
        return self._decide("after_step", step, lr, snapshot)

    def record(self, policy: str, knob: str, new: KnobValue, step: int, reason: str) -> Decision:
        """A change the ranks agreed on outside a decision point (the elastic group's
        membership after a failure); it becomes a Decision like any other."""
        decision = Decision(step, self._clock_s(), policy, knob, self.values[knob], new, reason)
        self._apply([decision])
        return decision

    def _decide(
        self, hook: Hook, step: int, lr: float, snapshot: Snapshot | None
    ) -> list[Decision]:
        users = [p for p in self.policies if hook in p.hooks]
        if not users or not self.due(step):
            return []  # every rank knows this from the step alone: no collective
        view = View(step, lr, dict(self.values), snapshot, dict(self.last_change))
        proposals = self._propose(users, hook, view)
        agreed = self._agreement.agree(self._encode(proposals))
        decisions = self._decisions(agreed.tolist(), proposals, step)
        self._apply(decisions)
        return decisions

    def _propose(self, users: list[Policy], hook: Hook, view: View) -> dict[str, Proposal]:
        proposals: dict[str, Proposal] = {}
        for policy in users:
            seen = View(
                view.step,
                view.lr,
                {**view.knobs, **{k: p.value for k, p in proposals.items()}},
                view.snapshot,
                view.last_change,
            )
            for proposal in policy.propose(hook, seen):
                if self._knobs.get(proposal.knob, (None,))[0] is not policy:
                    raise ValueError(f"policy {policy.name} proposed {proposal.knob}, not its knob")
                proposals[proposal.knob] = proposal
        return proposals

    def _encode(self, proposals: Mapping[str, Proposal]) -> torch.Tensor:
        vector = torch.full((len(self._knobs),), math.nan, dtype=torch.float64)
        for i, (name, (_, knob)) in enumerate(self._knobs.items()):
            if name in proposals and proposals[name].value != self.values[name]:
                vector[i] = knob.encode(proposals[name].value)
        return vector

    def _decisions(
        self, agreed: list[float], proposals: Mapping[str, Proposal], step: int
    ) -> list[Decision]:
        decisions = []
        for encoded, (name, (policy, knob)) in zip(agreed, self._knobs.items(), strict=True):
            if math.isnan(encoded):
                continue
            new = knob.decode(encoded)
            mine = proposals.get(name)
            reason, evidence = FOLLOWED, {}
            if mine is not None and mine.value == new:
                reason, evidence = mine.reason, dict(mine.evidence)
            old = self.values[name]
            decisions.append(
                Decision(step, self._clock_s(), policy.name, name, old, new, reason, evidence)
            )
        return decisions

    def _apply(self, decisions: list[Decision]) -> None:
        for d in decisions:
            self.values[d.knob] = d.new
            self.last_change[d.knob] = d.step
        self.decisions.extend(decisions)


def _owned_knobs(policies: Sequence[Policy]) -> dict[str, tuple[Policy, Knob]]:
    owned: dict[str, tuple[Policy, Knob]] = {}
    for policy in policies:
        for knob in policy.knobs:
            if knob.name in owned:
                other = owned[knob.name][0].name
                raise ValueError(f"knob {knob.name} belongs to {other} and {policy.name}")
            owned[knob.name] = (policy, knob)
    return owned
