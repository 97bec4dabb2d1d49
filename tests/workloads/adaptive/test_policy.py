"""The Controller: composition in order, one owner per knob, and, on 3 gloo ranks, the same
decisions at the same step everywhere even when the ranks' own proposals differ."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from workloads.adaptive.batch import AdaptiveBatchConfig, AdaptiveBatchPolicy
from workloads.adaptive.monitors import Monitor, MonitorConfig
from workloads.adaptive.policy import (
    FOLLOWED,
    Controller,
    Hook,
    Knob,
    Proposal,
    RankZeroDecides,
    SingleProcess,
    View,
)
from workloads.adaptive.sampler import Cursor, epoch_order
from workloads.strategies import gradients
from workloads.strategies.base import Collectives, flat_all_reduce_mean
from workloads.telemetry.timing import CpuClock, StepTimer


class SetTo:
    """Proposes knob := value(view), in the hooks given."""

    def __init__(
        self, name: str, knob: Knob, value: Any, hooks: tuple[Hook, ...] = ("after_step",)
    ):
        self.name, self.knobs, self.hooks, self._value = name, (knob,), hooks, value
        self.calls = 0

    def propose(self, hook: Hook, view: View) -> Sequence[Proposal]:
        self.calls += 1
        return (Proposal(self.knobs[0].name, self._value(view), f"{self.name} says so"),)


def controller(*policies: Any, initial: dict[str, Any], interval: int = 1) -> Controller:
    return Controller(policies, initial, SingleProcess(), interval, clock_s=lambda: 1.5)


def test_a_later_policy_sees_what_an_earlier_one_proposed_at_the_same_point():
    first = SetTo("first", Knob("a", integral=True), lambda v: 5)
    second = SetTo("second", Knob("b", integral=True), lambda v: 2 * v.knobs["a"])
    decisions = controller(first, second, initial={"a": 1, "b": 1}).after_step(0, 0.1, None)
    assert [(d.knob, d.old, d.new) for d in decisions] == [("a", 1, 5), ("b", 1, 10)]


def test_a_knob_has_one_owner():
    with pytest.raises(ValueError, match="belongs to one and two"):
        controller(
            SetTo("one", Knob("a"), lambda v: 1),
            SetTo("two", Knob("a"), lambda v: 2),
            initial={"a": 0},
        )


def test_a_policy_may_not_propose_another_policys_knob():
    class Rogue(SetTo):
        def propose(self, hook: Hook, view: View) -> Sequence[Proposal]:
            return (Proposal("b", 3, "not mine"),)

    c = controller(
        Rogue("rogue", Knob("a"), None),
        SetTo("b", Knob("b"), lambda v: 1),
        initial={"a": 0, "b": 0},
    )
    with pytest.raises(ValueError, match="rogue proposed b"):
        c.after_step(0, 0.1, None)


def test_every_knob_needs_an_initial_value():
    with pytest.raises(ValueError, match="no initial value for knob"):
        controller(SetTo("p", Knob("a"), lambda v: 1), initial={})


def test_policies_are_asked_only_at_decision_points_and_only_in_their_hooks():
    policy = SetTo("p", Knob("a", integral=True), lambda v: v.step)
    c = controller(policy, initial={"a": 0}, interval=3)
    assert c.before_step(3, 0.1) == []  # an after_step policy
    assert c.after_step(4, 0.1, None) == []  # not a decision point
    assert policy.calls == 0
    [decision] = c.after_step(6, 0.1, None)
    assert (decision.step, decision.old, decision.new, decision.time_s) == (6, 0, 6, 1.5)
    assert c.last_change == {"a": 6} and c.values == {"a": 6}


def test_proposing_the_current_value_is_no_decision():
    c = controller(SetTo("p", Knob("a"), lambda v: 2.0), initial={"a": 2.0})
    assert c.after_step(0, 0.1, None) == []


def test_categorical_knobs_travel_as_indices_and_come_back_as_names():
    knob = Knob("mode", choices=("exact", "averaging"))
    assert knob.decode(knob.encode("averaging")) == "averaging"
    c = controller(SetTo("p", knob, lambda v: "averaging"), initial={"mode": "exact"})
    [decision] = c.after_step(0, 0.1, None)
    assert (decision.old, decision.new) == ("exact", "averaging")
    assert decision.to_event()["reason"] == "p says so"


def test_a_change_agreed_outside_a_decision_point_is_recorded_like_any_other():
    c = controller(
        SetTo("elastic", Knob("workers", integral=True), lambda v: 3), initial={"workers": 3}
    )
    decision = c.record("elastic", "workers", 2, step=57, reason="w2 left")
    assert decision.agreed_part() == (57, "workers", 3, 2)
    assert c.values["workers"] == 2 and c.decisions == [decision]


# ---- on 3 gloo ranks ------------------------------------------------------------------


def _rank_local_proposals(rank: int, world_size: int) -> list[tuple[Any, str]]:
    """Each rank would pick its own value (a rank-local statistic); rank 0's wins everywhere."""
    policy = SetTo("local", Knob("a", integral=True), lambda v: 10 * (rank + 1) + v.step)
    c = Controller([policy], {"a": 0}, RankZeroDecides(torch.device("cpu")), 2, lambda: 0.0)
    out = []
    for step in range(5):
        out += [(d.agreed_part(), d.reason) for d in c.after_step(step, 0.1, None)]
    return out


def test_rank_zero_decides_for_everyone_even_when_the_ranks_would_differ(three_ranks):
    ranks = [r["local"] for r in three_ranks]
    expected = [(0, "a", 0, 10), (2, "a", 10, 12), (4, "a", 12, 14)]
    for rank, decisions in enumerate(ranks):
        assert [agreed for agreed, _ in decisions] == expected
        reasons = {reason for _, reason in decisions}
        assert reasons == ({"local says so"} if rank == 0 else {FOLLOWED})


NUM_SAMPLES, DIM = 3000, 16


def _adaptive_batch_run(rank: int, world_size: int) -> dict[str, Any]:
    """A small training run on rank-dependent data whose global batch follows B_noise."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(NUM_SAMPLES, DIM, generator=gen)
    y = (x[:, 0] + 2.0 * torch.randn(NUM_SAMPLES, generator=gen) > 0).long()  # very noisy
    torch.manual_seed(0)
    model = nn.Linear(DIM, 2)
    monitor = Monitor(MonitorConfig(interval_steps=2, ema_decay=0.5), torch.device("cpu"))
    strategy = gradients.GradientSyncStrategy(
        model, Collectives(), monitor.probe.wrap_exchange(flat_all_reduce_mean)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    policy = AdaptiveBatchPolicy(AdaptiveBatchConfig(12, 768), base_global_batch=12)
    c = Controller(
        [policy],
        {"global_batch": 12, "lr_factor": 1.0},
        RankZeroDecides(torch.device("cpu")),
        2,
        lambda: 0.0,
    )
    order, cursor, timer = epoch_order(NUM_SAMPLES, 0, 1), Cursor(0), StepTimer(CpuClock())
    steps: list[torch.Tensor] = []
    step = 0
    while not cursor.epoch_done(NUM_SAMPLES, world_size) and step < 40:
        global_batch = int(c.values["global_batch"])
        index = cursor.step_indices(order, global_batch, world_size, rank)
        steps.append(index)
        monitor.begin_step(step)
        timer.start()
        strategy.backward(nn.functional.cross_entropy(model(x[index]), y[index]), timer)
        for group in optimizer.param_groups:
            group["lr"] = 0.05 * float(c.values["lr_factor"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        snapshot = monitor.exchange(step, len(index))
        cursor = cursor.advance(NUM_SAMPLES, global_batch, world_size)
        c.after_step(step, 0.05, snapshot)
        monitor.record_time(timer.finish())
        step += 1
    return {"decisions": [d.agreed_part() for d in c.decisions], "steps": steps}


def _both_runs(rank: int, world_size: int) -> dict[str, Any]:
    return {
        "local": _rank_local_proposals(rank, world_size),
        **_adaptive_batch_run(rank, world_size),
    }


@pytest.fixture(scope="module")
def three_ranks() -> list[dict[str, Any]]:
    return run_ranks(_both_runs, world_size=3)


@pytest.fixture(scope="module")
def adaptive_batch_ranks(three_ranks) -> list[dict[str, Any]]:
    return three_ranks


def test_every_rank_changes_the_batch_at_the_same_steps(adaptive_batch_ranks):
    decisions = adaptive_batch_ranks[0]["decisions"]
    batches = [d for d in decisions if d[1] == "global_batch"]
    assert len(batches) >= 2  # the noisy task's B_noise grows the batch more than once
    assert all(new > old for _, _, old, new in batches)
    for other in adaptive_batch_ranks[1:]:
        assert other["decisions"] == decisions


def test_the_per_worker_batch_follows_the_global_batch_and_no_sample_repeats(adaptive_batch_ranks):
    per_rank = [r["steps"] for r in adaptive_batch_ranks]
    for step_parts in zip(*per_rank, strict=True):
        assert len({p.numel() for p in step_parts}) == 1  # the same per-worker batch
    seen = torch.cat([p for steps in per_rank for p in steps])
    assert seen.numel() == torch.unique(seen).numel()
    sizes = [p.numel() * 3 for p in per_rank[0]]
    changes = {
        step + 1: new
        for step, knob, _, new in adaptive_batch_ranks[0]["decisions"]
        if knob == "global_batch"
    }
    expected, current, left = [], 12, NUM_SAMPLES
    for step in range(len(sizes)):
        current = changes.get(step, current)
        expected.append(min(current, left - left % 3))  # the epoch's last step is shorter
        left -= expected[-1]
    assert sizes == expected  # applied from the step after the decision
