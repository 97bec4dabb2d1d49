"""Monitors on 2 real gloo ranks: the probe reads exactly the local and averaged gradient
norms inside DDP's hooks (over several buckets) and the allreduce exchange, and every rank
gets the same snapshot from one gather."""

from __future__ import annotations

import copy
import gc
import math
from typing import Any

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from workloads.adaptive.batch import AdaptiveBatchConfig, AdaptiveBatchPolicy
from workloads.adaptive.monitors import Monitor, MonitorConfig, summarize
from workloads.adaptive.noise import NoiseScale, simple_estimates, worker_variance
from workloads.adaptive.policy import View
from workloads.adaptive.probes import GradientProbe
from workloads.strategies import ddp, gradients
from workloads.strategies.base import Collectives, flat_all_reduce_mean
from workloads.telemetry.timing import CpuClock, StepTimer

WORLD, BATCH, STEPS = 2, 8, 4


def two_bucket_net() -> nn.Module:
    """Past DDP's 1 MiB first bucket, so the probe must add norms over buckets."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(BATCH, 512, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)


def _local_gradient(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    """This rank's gradient of the step, without any communication (brute force)."""
    local = copy.deepcopy(model)
    x, y = _batch(rank, step)
    nn.functional.cross_entropy(local(x), y).backward()
    return torch.cat([p.grad.flatten() for p in local.parameters()]).double()


def _train(rank: int, strategy: Any, model: nn.Module, monitor: Monitor) -> dict[str, Any]:
    timer = StepTimer(CpuClock())
    out: dict[str, Any] = {"snapshots": {}, "local": {}, "mean": {}, "parts": []}
    for step in range(STEPS):
        out["local"][step] = _local_gradient(model, rank, step)
        monitor.begin_step(step)
        timer.start()
        x, y = _batch(rank, step)
        strategy.backward(nn.functional.cross_entropy(strategy.module(x), y), timer)
        out["mean"][step] = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
        model.zero_grad(set_to_none=True)  # no optimizer: every step has the same weights
        if not monitor.due(step):  # what the probe read while off: nothing
            monitor.probe.arm()
            out["parts"].append(monitor.probe.disarm())
        snapshot = monitor.exchange(step, BATCH)
        if snapshot is not None:
            out["snapshots"][step] = snapshot.to_event()
        timer.finish()
        monitor.record_time({"forward": 0.01 * (rank + 1), "communication": 0.5})
    out["ddp_parts"] = _ddp_parts(model, strategy, monitor.probe, rank)
    return out


def _ddp_parts(model: nn.Module, strategy: Any, probe: GradientProbe, rank: int) -> int:
    """How many parts one armed backward pass reads."""
    probe.arm()
    x, y = _batch(rank, 0)
    strategy.backward(nn.functional.cross_entropy(strategy.module(x), y), StepTimer(CpuClock()))
    model.zero_grad(set_to_none=True)
    reading = probe.disarm()
    return 0 if reading is None else reading.parts


def _both_strategies(rank: int, world_size: int) -> dict[str, Any]:
    comm = Collectives()
    results = {}
    for name in ("ddp", "allreduce"):
        model = two_bucket_net()
        monitor = Monitor(MonitorConfig(interval_steps=2), torch.device("cpu"))
        if name == "ddp":
            hook = monitor.probe.wrap_comm_hook(ddp.all_reduce_hook(comm))
            strategy = ddp.DdpStrategy(model, CpuClock(), comm, hook)
        else:
            exchange = monitor.probe.wrap_exchange(flat_all_reduce_mean)
            strategy = gradients.GradientSyncStrategy(model, comm, exchange)
        results[name] = _train(rank, strategy, model, monitor)
        del strategy
        gc.collect()
    return results


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_ranks(_both_strategies, world_size=WORLD)


@pytest.mark.parametrize("name", ["ddp", "allreduce"])
def test_every_rank_gets_the_same_snapshots_at_the_monitoring_steps(ranks, name):
    assert sorted(ranks[0][name]["snapshots"]) == [0, 2]
    for other in ranks[1:]:
        assert other[name]["snapshots"] == ranks[0][name]["snapshots"]


@pytest.mark.parametrize("name", ["ddp", "allreduce"])
@pytest.mark.parametrize("step", [0, 2])
def test_noise_estimates_equal_the_formula_on_brute_force_norms(ranks, name, step):
    local = [r[name]["local"][step] for r in ranks]
    mean = torch.stack(local).mean(0)
    torch.testing.assert_close(ranks[0][name]["mean"][step], mean, rtol=1e-5, atol=1e-7)
    local_sq = [float(g.square().sum()) for g in local]
    mean_sq = float(mean.square().sum())
    expected = simple_estimates(sum(local_sq) / WORLD, mean_sq, BATCH, BATCH * WORLD)
    snapshot = ranks[0][name]["snapshots"][step]
    assert snapshot["grad_sq"] == pytest.approx(expected.grad_sq, rel=1e-4)
    assert snapshot["trace_sigma"] == pytest.approx(expected.trace_sigma, rel=1e-4)
    assert snapshot["grad_variance"] == pytest.approx(worker_variance(local_sq, mean_sq), rel=1e-4)
    assert (snapshot["small_batch"], snapshot["big_batch"]) == (BATCH, BATCH * WORLD)


def test_the_ddp_probe_adds_up_every_bucket_and_reads_nothing_when_off(ranks):
    assert ranks[0]["ddp"]["ddp_parts"] >= 2  # every bucket read, summed
    assert ranks[0]["allreduce"]["ddp_parts"] == 1  # one list of gradients
    assert ranks[0]["ddp"]["parts"] == [None, None]  # steps 1 and 3: nothing read


def test_step_and_compute_times_are_each_workers_own_means_since_the_last_gather(ranks):
    snapshot = ranks[0]["ddp"]["snapshots"][2]  # steps 0 and 1 recorded before it
    assert snapshot["compute_time_s"] == pytest.approx([0.01, 0.02])
    assert snapshot["step_time_s"] == pytest.approx([0.51, 0.52])


def test_the_noise_scale_is_the_ratio_of_the_smoothed_estimates(ranks):
    first, second = (ranks[0]["ddp"]["snapshots"][s] for s in (0, 2))
    decay = MonitorConfig(interval_steps=2).reading_decay  # as _both_strategies monitors
    g = decay * first["grad_sq"] + (1 - decay) * second["grad_sq"]
    s = decay * first["trace_sigma"] + (1 - decay) * second["trace_sigma"]
    assert second["grad_sq_ema"] == pytest.approx(g)
    if g > 0:
        assert second["b_noise"] == pytest.approx(max(0.0, s) / g)


def test_a_rank_without_a_reading_leaves_the_noise_scale_unmeasured():
    nan = float("nan")
    rows = [[1.0, 0.5, 8, 0.1, 0.1, nan, nan], [nan, nan, 8, 0.1, 0.1, nan, nan]]
    snapshot, noise = summarize(rows, 0, NoiseScale.start(0.9))
    assert snapshot.estimates is None and snapshot.b_noise is None
    assert noise.grad_sq.value is None


def test_gradients_that_overflow_the_noise_scale_leave_it_unmeasured_and_the_batch_alone():
    # Finite but huge gradients (norms near 1e150, a model about to diverge) after tiny ones:
    # the smoothed |G|^2 is 9e-301 and tr(Sigma) 2e299, whose ratio overflows to inf.
    nan = float("nan")
    _, noise = summarize([[1e-300, 1e-300, 1, 0.1, 0.1, nan, nan]] * 2, 0, NoiseScale.start(0.9))
    snapshot, _ = summarize([[2e300, 1e300, 1, 0.1, 0.1, nan, nan]] * 2, 10, noise)
    assert snapshot.b_noise is None
    policy = AdaptiveBatchPolicy(AdaptiveBatchConfig(2, 64), 2)
    view = View(10, 0.1, {"global_batch": 2, "lr_factor": 1.0}, snapshot)
    assert policy.propose("after_step", view) == ()


def test_a_world_of_one_has_no_noise_scale():
    snapshot, _ = summarize(
        [[1.0, 1.0, 8, 0.1, 0.1, float("nan"), float("nan")]], 0, NoiseScale.start(0.9)
    )
    assert snapshot.estimates is None


def test_divergence_is_relative_to_the_averaged_model():
    rows = [[float("nan")] * 2 + [8, 0.1, 0.1, d, 4.0] for d in (0.02, 0.06)]
    snapshot, _ = summarize(rows, 0, NoiseScale.start(0.9))
    assert snapshot.divergence == pytest.approx(0.04 / 4.0)


def test_an_unarmed_probe_reads_nothing():
    assert GradientProbe().disarm() is None


def _rows_of_a_converging_run(step: int) -> list[list[float]]:
    """Two workers' exact norms at `step` of a run whose |G|^2 shrinks as training goes on
    (e^(-step/100)) under a constant tr(Sigma) = 1: B_noise grows, as in real training."""
    grad_sq, trace, b = math.exp(-step / 100), 1.0, 8
    row = [grad_sq + trace / b, grad_sq + trace / (2 * b), b, 0.1, 0.1, math.nan, math.nan]
    return [row, list(row)]


@pytest.mark.parametrize("decay", [0.9, 0.5])
def test_the_noise_scale_of_a_run_does_not_depend_on_how_often_it_is_read(decay):
    """The interval sets what monitoring costs (bench/adaptive_overhead.py), not what it
    reads: the EMAs remember the same steps of training at intervals 1, 10 and 100."""
    b_noise = {}
    for interval in (1, 10, 100):
        monitor = Monitor(MonitorConfig(interval, decay), torch.device("cpu"))
        noise = monitor.noise
        for step in range(0, 601, interval):
            snapshot, noise = summarize(_rows_of_a_converging_run(step), step, noise)
        b_noise[interval] = snapshot.b_noise
    assert max(b_noise.values()) / min(b_noise.values()) < 2, b_noise
