"""Adaptive synchronisation: the switching rule, and on 2 gloo ranks the strategy's modes,
its divergence measurement, and identical replicas after switching back to exact."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from workloads.adaptive.monitors import Snapshot
from workloads.adaptive.policy import View
from workloads.adaptive.sync import (
    AdaptiveSyncConfig,
    AdaptiveSyncPolicy,
    AdaptiveSyncStrategy,
    SyncState,
    next_sync,
    predicted_divergence,
)
from workloads.optimization.sgd import FusedSGD
from workloads.strategies.base import Collectives
from workloads.telemetry.timing import CpuClock, StepTimer

CONFIG = AdaptiveSyncConfig(low=1e-5, high=1e-4, min_period=2, max_period=16)


def test_high_divergence_halves_the_period_then_returns_to_exact():
    state, _ = next_sync(SyncState("averaging", 8), 5e-4, None, CONFIG)
    assert state == SyncState("averaging", 4)
    state, reason = next_sync(SyncState("averaging", 2), 5e-4, None, CONFIG)
    assert state.mode == "exact" and "> high" in reason


def test_low_divergence_doubles_the_period_up_to_the_maximum():
    assert next_sync(SyncState("averaging", 4), 1e-6, None, CONFIG)[0] == SyncState("averaging", 8)
    assert next_sync(SyncState("averaging", 16), 1e-6, None, CONFIG) is None


def test_divergence_between_the_thresholds_changes_nothing():
    assert next_sync(SyncState("averaging", 4), 5e-5, None, CONFIG) is None


def test_exact_training_starts_averaging_when_the_predicted_divergence_is_low():
    assert next_sync(SyncState("exact", 4), None, 1e-6, CONFIG)[0] == SyncState("averaging", 2)
    assert next_sync(SyncState("exact", 4), None, 1e-3, CONFIG) is None
    assert next_sync(SyncState("exact", 4), None, None, CONFIG) is None


def test_predicted_divergence_is_the_random_walk_of_local_steps():
    # lr_eff = 0.1 / (1 - 0.5) = 0.2; 0.04 * 4 steps * (1/2) * V=3 / |theta|^2=6
    assert predicted_divergence(0.1, 0.5, 4, 3.0, 2, 6.0) == pytest.approx(0.04)


def test_predicted_divergence_matches_simulated_local_sgd_without_curvature():
    # Gradients G + noise, no curvature: replicas drift apart exactly as a random walk.
    gen = torch.Generator().manual_seed(0)
    world, steps, lr, sigma, dim, trials = 4, 8, 0.05, 0.7, 50, 400
    noise = sigma * torch.randn(trials, steps, world, dim, generator=gen, dtype=torch.float64)
    theta = -lr * noise.sum(1)  # [trials, world, dim] from a common start (G cancels)
    measured = (theta - theta.mean(1, keepdim=True)).square().sum(-1).mean()
    variance = sigma**2 * dim  # trace of the workers' gradient covariance
    assert float(measured) == pytest.approx(
        predicted_divergence(lr, 0.0, steps, variance, world, 1.0), rel=0.05
    )


def test_thresholds_and_periods_are_validated():
    with pytest.raises(ValueError, match="low < high"):
        AdaptiveSyncConfig(low=1e-3, high=1e-4)
    with pytest.raises(ValueError, match="min_period"):
        AdaptiveSyncConfig(min_period=1)


def _feed(policy: AdaptiveSyncPolicy, mode: str, readings: list[dict[str, float]]) -> list:
    """Feeds one snapshot a decision point (10 steps apart) and applies what it proposes, as
    the Controller does; returns the proposals of every point."""
    knobs: dict[str, Any] = {"sync_mode": mode, "averaging_period": 2}
    changes: dict[str, int] = {}
    out = []
    for i, fields in enumerate(readings):
        step = 10 * (i + 1)
        view = View(step, 0.01, dict(knobs), Snapshot(step=step, world_size=2, **fields), changes)
        proposals = policy.propose("after_step", view)
        for p in proposals:
            knobs[p.knob] = p.value
            changes[p.knob] = step
        out.append(proposals)
    return out


def _variance_for(predicted: float) -> dict[str, float]:
    """A snapshot whose predicted divergence (lr 0.01, period 2, 2 workers, |theta|^2 1) is
    `predicted`."""
    return {"grad_variance": predicted / (0.01**2 * 2 * 0.5), "param_sq_norm": 1.0}


def test_one_outlier_reading_switches_nothing():
    # The run: one variance reading far below its neighbours switched to averaging.
    readings = [_variance_for(v) for v in (1e-3, 2e-3, 1e-6, 3e-3, 1e-3, 2e-3, 1e-3)]
    assert not any(_feed(AdaptiveSyncPolicy(CONFIG), "exact", readings))


def test_a_sustained_low_divergence_switches_once_with_its_evidence():
    readings = [_variance_for(v) for v in (1e-3, 2e-3, 1e-6, 2e-6, 1e-6, 3e-6, 2e-6)]
    proposals = _feed(AdaptiveSyncPolicy(CONFIG), "exact", readings)
    switched = [i for i, p in enumerate(proposals) if p]
    assert switched == [4]  # the fifth reading: the median of five is low only now
    mode, _ = proposals[4]
    assert mode.value == "averaging"
    assert mode.evidence["statistic"] == "predicted_divergence"
    assert mode.evidence["median"] == pytest.approx(2e-6)
    assert len(mode.evidence["readings"]) == 5


def test_averaging_waits_for_readings_of_its_own_before_tightening():
    readings = [{"divergence": 5e-4}] * 4
    policy = AdaptiveSyncPolicy(CONFIG)
    assert not any(_feed(policy, "averaging", readings))
    [[mode, period]] = [p for p in _feed(policy, "averaging", [{"divergence": 5e-4}]) if p]
    assert (mode.value, period.value) == ("exact", 2)


def test_a_prediction_that_averaging_proved_too_low_is_calibrated():
    policy = AdaptiveSyncPolicy(CONFIG)
    low = [_variance_for(2e-6)] * 5
    assert _feed(policy, "exact", low)[-1][0].value == "averaging"
    # Averaging measured 100 times the prediction: back to exact, and the same prediction
    # no longer starts averaging.
    back = _feed(policy, "averaging", [{"divergence": 2e-4}] * 5)
    assert back[-1][0].value == "exact"
    assert policy.calibration == pytest.approx(100)
    assert not any(_feed(policy, "exact", low))


# ---- on 2 gloo ranks ------------------------------------------------------------------


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Weights and momenta: what exact training keeps identical. (BatchNorm statistics are
    each rank's own under exact training, as with the `allreduce` strategy, and averaged
    before evaluation by sync_buffers.)"""
    momenta = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    return [t.detach().clone() for t in [*model.parameters(), *momenta]]


def _switching_run(rank: int, world_size: int) -> dict[str, Any]:
    model = _net()
    measured: list[tuple[float, float]] = []
    strategy = AdaptiveSyncStrategy(
        model,
        Collectives(),
        SyncState("averaging", 3),
        on_divergence=lambda d, m: measured.append((d, m)),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    timer, out = StepTimer(CpuClock()), {"states": {}, "before_average": None}

    def step(i: int) -> None:
        timer.start()
        x, y = torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        strategy.backward(nn.functional.cross_entropy(model(x), y), timer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i == 2:  # the third local step averages: keep the weights it starts from
            out["before_average"] = [p.detach().clone() for p in model.parameters()]
        strategy.after_step(timer)
        timer.finish()
        out["states"][i] = _state(model, optimizer)

    for i in range(5):  # steps 0-2 averaged at 2; steps 3-4 local again
        step(i)
    strategy.switch(SyncState("exact", 3), optimizer)  # the agreed switch, between steps
    out["states"]["switch"] = _state(model, optimizer)
    for i in range(5, 8):
        step(i)
    strategy.sync_buffers()
    out["buffers"] = [b.clone() for b in model.buffers()]
    out["measured"] = measured
    return out


@pytest.fixture(scope="module")
def switching() -> list[dict[str, Any]]:
    return run_ranks(_switching_run, world_size=2)


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_replicas_drift_apart_between_averages_and_meet_at_them(switching):
    first, second = switching
    assert not _equal(first["states"][0], second["states"][0])  # local steps
    weights = len(list(_net().parameters()))
    assert _equal(first["states"][2][:weights], second["states"][2][:weights])  # averaged
    assert not _equal(first["states"][4], second["states"][4])


def test_the_measured_divergence_is_each_replicas_distance_from_the_average(switching):
    first, second = switching
    mean = [
        (a + b) / 2 for a, b in zip(first["before_average"], second["before_average"], strict=True)
    ]
    for result in switching:
        own = result["before_average"]
        expected = sum(
            float((p - m).double().square().sum()) for p, m in zip(own, mean, strict=True)
        )
        divergence_sq, mean_sq = result["measured"][0]
        assert divergence_sq == pytest.approx(expected, rel=1e-4)
        assert mean_sq == pytest.approx(
            sum(float(m.double().square().sum()) for m in mean), rel=1e-5
        )
    assert len(first["measured"]) == 1  # one average in steps 0-4 at period 3


def test_switching_back_to_exact_makes_the_replicas_bitwise_identical_and_keeps_them_so(switching):
    first, second = switching
    assert _equal(first["states"]["switch"], second["states"]["switch"])  # weights and momenta
    for i in range(5, 8):
        assert _equal(first["states"][i], second["states"][i])


def test_buffers_are_averaged_before_evaluation(switching):
    assert _equal(switching[0]["buffers"], switching[1]["buffers"])


class _LateLayerNet(nn.Module):
    """A layer in no forward while the run is exact, then in rank 0's alone."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(6, 3)
        self.late = nn.Linear(3, 3)
        self.late_on_rank: int | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return self.late(y) if torch.distributed.get_rank() == self.late_on_rank else y


def _late_layer_run(rank: int, world_size: int) -> list[torch.Tensor]:
    model = _LateLayerNet()
    strategy = AdaptiveSyncStrategy(model, Collectives(), SyncState("exact", 100))
    optimizer = FusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    timer = StepTimer(CpuClock())

    def steps(n: int) -> None:
        for _ in range(n):
            timer.start()
            x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
            strategy.backward(nn.functional.cross_entropy(model(x), y), timer)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            strategy.after_step(timer)
            timer.finish()

    steps(2)  # exact: `late` has no gradient, so no optimizer state, on any rank
    strategy.switch(SyncState("averaging", 100), optimizer)
    model.late_on_rank = 0
    steps(2)  # local: rank 0's optimizer alone gives `late` state
    strategy.switch(SyncState("exact", 100), optimizer)
    steps(2)
    return [p.detach().clone() for p in model.parameters()]


def test_state_that_only_some_replicas_hold_is_averaged_when_switching_back():
    # The replicas gave the optimizer-state all-reduce buffers of different sizes (gloo
    # aborted): the others' missing state now counts as zeros, a fresh state.
    first, second = run_ranks(_late_layer_run, world_size=2)
    assert _equal(first, second)
