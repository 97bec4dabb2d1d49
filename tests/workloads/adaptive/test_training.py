"""The adaptive policies inside the real classification loop, on 3 gloo ranks: the task that
workloads.train builds, its epochs, the Controller's decisions and the monitors' events.

One run per scenario, shared by its assertions: cnn-digits (the real data and model) with the
batch policy (a small starting batch, so that the noise scale soon exceeds it), and with the
sync policy (thresholds set so that it switches to averaging and the period moves both ways).
Each rank returns what it emitted (every rank's, not only rank 0's) and its final weights.
Under averaging no averaged gradient exists, so no noise scale is measured and the batch
policy has nothing to decide from: the two are tested apart.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from contract.events import DECISION, MONITORS
from runner.job.benchmarks import BENCHMARKS
from tests.distributed import run_ranks
from workloads.adaptive import run as adaptive_run
from workloads.configuration.train_config import ConfigError, TrainConfig

EPOCHS = 3
BASE = BENCHMARKS["cnn-digits"].config


def _config(**changes: Any) -> TrainConfig:
    return BASE.replace(max_epochs=EPOCHS, stop_at_target=False, **changes)


BATCH = _config(
    batch_size=4,  # B0 = 12 on 3 ranks: the noise scale (20-50 here) soon exceeds 2 x B0
    lr=0.01,
    policy=("batch",),
    strategy="allreduce",
    monitor_interval_steps=4,
)
SYNC = _config(
    batch_size=4,
    lr=0.01,
    policy=("batch", "sync"),
    strategy="adaptive-sync",
    monitor_interval_steps=4,
    # Set so that training switches to averaging at once and the period then doubles and
    # halves: the thresholds are the test's, not advice. The policy acts on the median of 5
    # readings since the period last changed, so the divergence here climbs past 1e-3 within
    # the run's 3 epochs (8e-5 at period 2, 3e-3 at period 8 on these seeds).
    sync_low=0.001,
    sync_high=0.002,
)


def _train(rank: int, world_size: int, config_json: str) -> dict[str, Any]:
    from workloads import tasks
    from workloads.telemetry.mllog import RankLog
    from workloads.telemetry.timing import CpuClock

    config = TrainConfig.from_json(config_json)
    emitted: list[tuple[str, Any]] = []
    device = torch.device("cpu")
    torch.manual_seed(config.run.seed)
    adaptive = adaptive_run.build(config, world_size, device, lambda k, v: emitted.append((k, v)))
    assert adaptive is not None
    ctx = tasks.Context(config, rank, world_size, device, CpuClock(), RankLog(rank, None),
                        None, adaptive)  # fmt: skip
    task = tasks.build(ctx)
    steps = []
    for epoch in range(1, EPOCHS + 1):
        stats = task.train_epoch(epoch)
        steps.append(stats.steps)
        accuracy = task.evaluate(epoch).value
    trainer = task.trainer  # type: ignore[attr-defined]
    weights = [p.detach().clone() for p in trainer.strategy.inner.parameters()]
    task.close()
    return {
        "emitted": emitted,
        "steps": steps,
        "steps_done": adaptive.steps_done,
        "summary": adaptive.summary().to_dict(),
        "weights": weights,
        "accuracy": accuracy,
    }


@pytest.fixture(scope="module")
def batch() -> list[dict[str, Any]]:
    return run_ranks(_train, world_size=3, timeout_s=240, config_json=BATCH.to_json())


@pytest.fixture(scope="module")
def sync() -> list[dict[str, Any]]:
    return run_ranks(_train, world_size=3, timeout_s=240, config_json=SYNC.to_json())


def _decisions(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for k, v in result["emitted"] if k == DECISION]


def _agreed(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(d["step"], d["knob"], d["old"], d["new"]) for d in _decisions(result)]


@pytest.mark.parametrize("scenario", ["batch", "sync"])
def test_every_rank_takes_the_same_decisions_at_the_same_step(scenario, request):
    results = request.getfixturevalue(scenario)
    agreed = [_agreed(r) for r in results]
    assert agreed[0] and agreed[0] == agreed[1] == agreed[2]
    for result in results:
        for d in _decisions(result):
            assert d["step"] % BATCH.adaptive.monitor_interval_steps == 0  # decision points
            assert d["reason"] and d["time_s"] >= 0


def test_the_global_batch_grows_within_its_bounds_with_the_linear_lr_rule(batch):
    base = BATCH.data.batch_size * 3
    low, high = BATCH.adaptive.batch_bounds(base)
    decisions = _decisions(batch[0])
    grown = [(d["old"], d["new"]) for d in decisions if d["knob"] == "global_batch"]
    assert grown and all(low <= old < new <= high and new % 3 == 0 for old, new in grown)
    factors = [d["new"] for d in decisions if d["knob"] == "lr_factor"]
    assert factors == [new / base for _, new in grown]
    assert all("B_noise" in d["reason"] for d in decisions if d["knob"] == "global_batch")


def test_each_step_trains_with_the_batch_decided_before_it(batch):
    snapshots = [v for k, v in batch[0]["emitted"] if k == MONITORS]
    grown = {d["step"]: d["new"] for d in _decisions(batch[0]) if d["knob"] == "global_batch"}
    current = BATCH.data.batch_size * 3
    for snap in snapshots:  # the epoch's last step may be short, never longer
        assert snap["global_batch"] == snap["knobs"]["global_batch"] == current
        assert snap["samples"] <= current
        assert snap["world_size"] == 3 and len(snap["step_time_s"]) == 3
        current = grown.get(snap["step"], current)
    assert all(s["b_noise"] is not None for s in snapshots)


def test_a_bigger_batch_takes_fewer_steps_per_epoch_on_every_rank(batch):
    steps = batch[0]["steps"]
    assert steps[-1] < steps[0]
    assert [r["steps"] for r in batch] == [steps] * 3  # every rank ends each epoch together


def test_the_sync_policy_switches_to_averaging_and_moves_the_period_both_ways(sync):
    decisions = _decisions(sync[0])
    modes = [d["new"] for d in decisions if d["knob"] == "sync_mode"]
    assert modes[0] == "averaging"
    periods = [(d["old"], d["new"]) for d in decisions if d["knob"] == "averaging_period"]
    assert any(new > old for old, new in periods) and any(new < old for old, new in periods)
    lo, hi = SYNC.adaptive.sync_min_period, SYNC.adaptive.sync_max_period
    assert all(lo <= new <= hi for _, new in periods)
    measured = [v["divergence"] for k, v in sync[0]["emitted"] if k == MONITORS]
    assert any(d is not None for d in measured)  # the averaging measured the replicas


@pytest.mark.parametrize("scenario", ["batch", "sync"])
def test_the_replicas_agree_after_evaluation_and_report_the_same_knobs(scenario, request):
    results = request.getfixturevalue(scenario)
    for mine, theirs in zip(results[0]["weights"], results[2]["weights"], strict=True):
        torch.testing.assert_close(mine, theirs)
    finals = [r["summary"]["final"] for r in results]
    assert finals[0] == finals[1] == finals[2]
    assert results[0]["summary"]["decisions"] == len(_decisions(results[0]))
    assert results[0]["accuracy"] > 0.5  # it trained


def _monitor_only(rank: int, world_size: int, config_json: str) -> dict[str, Any]:
    return _train(rank, world_size, config_json)


def test_monitors_alone_decide_nothing_and_keep_the_batch(tmp_path):
    config = _config(monitor=True, monitor_interval_steps=5, strategy="allreduce")
    results = run_ranks(_monitor_only, world_size=2, timeout_s=180, config_json=config.to_json())
    for result in results:
        assert _decisions(result) == []
        snaps = [v for k, v in result["emitted"] if k == MONITORS]
        assert snaps and all(s["global_batch"] == 64 >= s["samples"] for s in snaps)
        assert any(s["b_noise"] is not None and s["grad_variance"] is not None for s in snaps)
    assert results[0]["summary"]["decisions"] == 0


@pytest.mark.parametrize(
    ("changes", "key", "says"),
    [
        ({"policy": ("sync",)}, "policy", "--set strategy=adaptive-sync"),
        ({"strategy": "adaptive-sync"}, "strategy", "add sync to --set policy"),
        ({"policy": ("batch", "batch")}, "policy", "twice"),
        ({"policy": ("none", "batch")}, "policy", "none stands alone"),
        ({"sync_low": 0.5, "sync_high": 0.1}, "sync_high", "must exceed sync_low"),
        ({"policy": ("batch",), "compile_model": True}, "compile_model", "inside the clock"),
    ],
)
def test_adaptive_settings_that_cannot_work_are_refused_naming_the_key(changes, key, says):
    with pytest.raises(ConfigError) as err:
        BASE.replace(**changes)
    assert err.value.key == key and says in str(err.value)


def test_policies_are_refused_where_the_loop_does_not_drive_them():
    with pytest.raises(ConfigError, match="classification loop only"):
        BENCHMARKS["lstm-wikitext2"].config.replace(policy=("batch",))
    with pytest.raises(ConfigError, match="static per-rank shards"):
        BENCHMARKS["logreg-epsilon"].config.replace(policy=("batch",))
    # the monitors and the sync policy work on static shards
    BENCHMARKS["logreg-epsilon"].config.replace(policy=("sync",), strategy="adaptive-sync")


@pytest.mark.parametrize(("bounds", "start"), [({"max_global_batch": 8}, 8),
                                               ({"min_global_batch": 128}, 128)])  # fmt: skip
def test_a_bound_set_across_the_starting_batch_is_where_the_run_starts(bounds, start):
    # cnn-digits starts at 32 x 2 = 64: a max below it (or a min above it) is where it starts,
    # and the LR follows by the rule; not a worker that fails on bounds it made itself.
    config = BASE.replace(policy=("batch",), strategy="allreduce", **bounds)
    run = adaptive_run.build(config, 2, torch.device("cpu"), print)
    assert run is not None
    assert run.controller.values == {"global_batch": start, "lr_factor": start / 64}


def test_policy_none_is_no_policy():
    assert BASE.with_overrides({"policy": "none"}).adaptive.policy == ()
    assert adaptive_run.build(BASE, 2, torch.device("cpu"), print) is None
