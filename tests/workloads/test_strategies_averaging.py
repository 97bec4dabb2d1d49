"""Model averaging on real 2-rank gloo steps: it steps locally and then equals the mean of the
local models, goes on from the run's step when rebuilt mid-run, and is due every period after
its warm-up."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import (
    config_for,
    mean_over_ranks,
    small_bn_net,
    step,
    trainer,
)
from workloads.strategies.averaging import averaging_due


def _model_averaging(rank: int, world_size: int, period: int) -> dict[str, object]:
    """Two steps of model averaging vs. the same two steps taken locally, then averaged."""
    template = small_bn_net()
    config = config_for("model-averaging", averaging_period=period, momentum=0.0, lr=0.1)
    tr = trainer(rank, world_size, config, copy.deepcopy(template), 2)
    local = trainer(rank, world_size, config_for("allreduce", momentum=0.0, lr=0.1), template, 2)
    local.strategy.backward = _local_backward  # type: ignore[method-assign]
    out: dict[str, object] = {}
    for i in range(2):
        step(tr, i)
        step(local, i)
        out[f"after_{i + 1}"] = _state(tr.strategy.inner)
        out[f"local_{i + 1}"] = _state(local.strategy.inner)
    out["local_mean_2"] = mean_over_ranks(out["local_2"])  # type: ignore[arg-type]
    return out


def _averaging_after_a_rebuild(rank: int, world_size: int, resumed: bool) -> list[torch.Tensor]:
    """One step of a model-averaging strategy built anew at the run's step 2, its warm-up of
    2 synchronous steps done (as after an elastic change), resumed there or not."""
    config = config_for("model-averaging", averaging_warmup_steps=2, averaging_period=1000,
                        momentum=0.0, lr=0.1)  # fmt: skip
    tr = trainer(rank, world_size, config, small_bn_net(), 2)
    if resumed:
        tr.strategy.resume(2)
    step(tr, 0)
    return [p.detach().clone() for p in tr.strategy.inner.parameters()]  # BN stats are local


@pytest.mark.parametrize("resumed", [True, False])
def test_model_averaging_rebuilt_mid_run_goes_on_from_the_runs_step(resumed):
    ranks = run_ranks(_averaging_after_a_rebuild, world_size=2, resumed=resumed)
    same = all(torch.equal(a, b) for a, b in zip(ranks[0], ranks[1], strict=True))
    # Past warm-up a step is local (the ranks' batches differ, so their weights do); a
    # strategy that started its warm-up again would all-reduce it (the same weights).
    assert same is not resumed


def _local_backward(loss: torch.Tensor, timer: object) -> None:
    loss.backward()  # no communication: what each worker would do alone


def _state(model: nn.Module) -> list[torch.Tensor]:
    return [
        t.detach().clone() for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()
    ]


def test_model_averaging_steps_locally_then_equals_the_mean_of_the_local_models():
    ranks = run_ranks(_model_averaging, world_size=2, period=2)
    for r in ranks:
        for ours, local in zip(r["after_1"], r["local_1"], strict=True):
            torch.testing.assert_close(ours, local)  # step 1 of period 2: purely local
        for ours, mean in zip(r["after_2"], r["local_mean_2"], strict=True):
            torch.testing.assert_close(ours, mean)  # step 2: the average, BatchNorm included
    assert not torch.allclose(ranks[0]["after_1"][0], ranks[1]["after_1"][0])


@pytest.mark.parametrize(
    ("steps_done", "warmup", "period", "due"),
    [(1, 0, 1, True), (1, 0, 2, False), (2, 0, 2, True), (3, 2, 1, True), (2, 2, 1, False),
     (6, 2, 2, True), (5, 2, 2, False)],
)  # fmt: skip
def test_averaging_is_due_every_period_after_the_warm_up(steps_done, warmup, period, due):
    assert averaging_due(steps_done, warmup, period) is due
