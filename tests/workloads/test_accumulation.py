"""Gradient accumulation through a strategy's no_sync(): micro-batches accumulate locally and
the last one's backward communicates, giving the mean over ranks of the summed gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import config_for, random_splits, small_bn_net
from workloads import strategies
from workloads.telemetry.timing import CpuClock, StepTimer

STRATEGIES = ["ddp", "allreduce", "allreduce-per-param", "gather-scatter", "model-averaging"]


def _every_strategy(rank: int, world_size: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    # One pair of processes for all strategies: spawning is most of such a test's time.
    return {name: _accumulated(rank, world_size, name) for name in STRATEGIES}


def _accumulated(rank: int, world_size: int, name: str) -> dict[str, list[torch.Tensor]]:
    """Gradients after two micro-batches (the first under no_sync), the local sums of both
    micro-batches' gradients, and what the first alone left after its backward."""
    config = (
        config_for(name, averaging_warmup_steps=1)
        if name == "model-averaging"
        else (config_for(name))
    )
    model = small_bn_net()
    reference = small_bn_net()  # the same weights (same seed), never communicated
    strategy = strategies.build(config.strategy, config.run.seed, model, CpuClock())
    splits = random_splits(rank, 2)
    halves = [slice(0, 8), slice(8, 16)]
    timer = StepTimer(CpuClock())
    timer.start()
    with strategy.no_sync():
        loss = nn.functional.cross_entropy(
            strategy.module(splits.train_x[halves[0]]), splits.train_y[halves[0]]
        )
        strategy.backward(loss, timer)
    after_first = [p.grad.clone() for p in strategy.inner.parameters()]
    loss = nn.functional.cross_entropy(
        strategy.module(splits.train_x[halves[1]]), splits.train_y[halves[1]]
    )
    strategy.backward(loss, timer)
    synced = [p.grad.clone() for p in strategy.inner.parameters()]
    for half in halves:
        nn.functional.cross_entropy(
            reference(splits.train_x[half]), splits.train_y[half]
        ).backward()
    local = [p.grad.clone() for p in reference.parameters()]
    return {"after_first": after_first, "synced": synced, "local": local}


@pytest.fixture(scope="module")
def accumulated():
    return run_ranks(_every_strategy, world_size=2)


@pytest.mark.parametrize("name", STRATEGIES)
def test_accumulated_micro_batches_give_the_mean_of_each_ranks_summed_gradients(accumulated, name):
    results = [r[name] for r in accumulated]
    first_locals = [r["after_first"] for r in results]
    # Under no_sync the first micro-batch's gradients stay local: the ranks differ.
    assert any(not torch.allclose(a, b) for a, b in zip(*first_locals, strict=True)), (
        "no_sync communicated"
    )
    expected = [(a + b) / 2 for a, b in zip(results[0]["local"], results[1]["local"], strict=True)]
    for r in results:
        for got, want in zip(r["synced"], expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
