"""Adaptive batch size: the growth rule, its bounds, the LR rule and the policy's proposals."""

from __future__ import annotations

import pytest

from workloads.adaptive.batch import (
    AdaptiveBatchConfig,
    AdaptiveBatchPolicy,
    fit_to_world,
    grown_batch,
    lr_factor,
)
from workloads.adaptive.monitors import Snapshot
from workloads.adaptive.policy import View


def test_the_batch_grows_by_the_largest_power_that_stays_under_b_noise():
    assert grown_batch(64, b_noise=300.0, world_size=4, max_global_batch=4096, growth=2.0) == 256


def test_the_batch_stays_until_b_noise_reaches_growth_times_it():
    assert grown_batch(64, b_noise=127.0, world_size=4, max_global_batch=4096, growth=2.0) is None
    assert grown_batch(64, b_noise=128.0, world_size=4, max_global_batch=4096, growth=2.0) == 128


def test_the_batch_is_capped_and_fitted_to_the_world():
    assert grown_batch(60, b_noise=1e6, world_size=7, max_global_batch=500, growth=2.0) == 497
    assert grown_batch(500, b_noise=1e6, world_size=4, max_global_batch=500, growth=2.0) is None


def test_fit_to_world_rounds_down_but_keeps_a_sample_per_worker():
    assert fit_to_world(100, 3) == 99
    assert fit_to_world(2, 3) == 3


@pytest.mark.parametrize(("rule", "factor"), [("linear", 4.0), ("sqrt", 2.0), ("none", 1.0)])
def test_the_lr_follows_the_batch_by_the_stated_rule(rule, factor):
    assert lr_factor(rule, 512, 128) == factor


def test_the_first_batch_is_bounded_and_fitted():
    config = AdaptiveBatchConfig(min_global_batch=32, max_global_batch=1024)
    assert config.start(8, world_size=3) == 30
    assert config.start(4096, world_size=4) == 1024


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_global_batch": 0, "max_global_batch": 8},
        {"min_global_batch": 16, "max_global_batch": 8},
        {"min_global_batch": 8, "max_global_batch": 16, "growth": 1.0},
        {"min_global_batch": 8, "max_global_batch": 16, "cooldown_steps": -1},
    ],
)
def test_bad_bounds_are_refused(kwargs):
    with pytest.raises(ValueError):
        AdaptiveBatchConfig(**kwargs)


def _view(step: int, b_noise: float | None, last: int | None = None) -> View:
    snapshot = Snapshot(step=step, world_size=4, b_noise=b_noise)
    changes = {} if last is None else {"global_batch": last}
    return View(step, 0.1, {"global_batch": 64, "lr_factor": 2.0}, snapshot, changes)


def _readings(policy: AdaptiveBatchPolicy, b_noises: list[float], last: int | None = None):
    """The proposals of one decision point per reading, 10 steps apart, from step 10."""
    return [
        policy.propose("after_step", _view(10 * (i + 1), b, last)) for i, b in enumerate(b_noises)
    ]


def test_the_policy_proposes_the_batch_and_its_lr_together():
    policy = AdaptiveBatchPolicy(
        AdaptiveBatchConfig(32, 1024, lr_rule="sqrt"), base_global_batch=32
    )
    *_, (batch, lr) = _readings(policy, [300.0] * 5)
    assert (batch.knob, batch.value) == ("global_batch", 256)
    assert (lr.knob, lr.value) == ("lr_factor", pytest.approx(8**0.5))
    assert "B_noise 300.0" in batch.reason
    assert batch.evidence["readings"] == [300.0] * 5


def test_one_outlier_reading_grows_nothing():
    policy = AdaptiveBatchPolicy(AdaptiveBatchConfig(32, 1024), 32)
    assert not any(_readings(policy, [50.0, 60.0, 1e5, 55.0, 60.0, 50.0, 58.0]))


def test_a_sustained_rise_grows_the_batch_once_the_median_holds_it():
    policy = AdaptiveBatchPolicy(AdaptiveBatchConfig(32, 1024), 32)
    proposals = _readings(policy, [50.0, 60.0, 300.0, 320.0, 310.0, 330.0])
    assert [i for i, p in enumerate(proposals) if p] == [4, 5]  # median 300 from the fifth
    assert proposals[4][0].evidence["median"] == 300.0


def test_the_policy_waits_for_a_noise_scale_and_its_cooldown():
    policy = AdaptiveBatchPolicy(AdaptiveBatchConfig(32, 1024, cooldown_steps=50), 32)
    assert policy.propose("after_step", _view(10, None)) == ()
    [*early, last] = [
        policy.propose("after_step", _view(s, 300.0, last=20)) for s in (30, 40, 50, 60, 70)
    ]
    assert not any(early) and len(last) == 2


def test_the_first_change_waits_for_the_noise_scales_memory_of_readings():
    policy = AdaptiveBatchPolicy(AdaptiveBatchConfig(32, 1024, min_readings=10), 32)

    def propose(step: int, readings: int):
        snapshot = Snapshot(step=step, world_size=4, b_noise=1e4, noise_readings=readings)
        view = View(step, 0.1, {"global_batch": 64, "lr_factor": 2.0}, snapshot, {})
        return policy.propose("after_step", view)

    assert not any(propose(10 * r, r) for r in range(1, 10))
    assert not any(propose(10 * r, r) for r in range(10, 14))  # 4 readings of evidence
    assert len(propose(140, 14)) == 2
