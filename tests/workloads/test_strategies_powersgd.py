"""PowerSGD on real 2-rank gloo steps: over two buckets it trains the same model on every rank,
its warm-up steps are plain all-reduce, and after them its update is a rank-r orthogonal
projection of the mean gradient."""

from __future__ import annotations

import copy
import gc

import pytest
import torch

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import (
    backward_gradients,
    config_for,
    local_gradients,
    mean_over_ranks,
    small_bn_net,
    step,
    trainer,
    two_bucket_net,
)


def _powersgd_over_two_buckets(rank: int, world_size: int) -> list[torch.Tensor]:
    config = config_for("powersgd", powersgd_rank=1, powersgd_start_iter=2)
    tr = trainer(rank, world_size, config, two_bucket_net(), 4)
    for i in range(4):  # two plain steps, then two compressed ones
        step(tr, i)
    weights = [p.detach().clone() for p in tr.strategy.inner.parameters()]
    del tr
    gc.collect()
    return weights


def test_powersgd_over_two_buckets_on_gloo_trains_the_same_model_on_every_rank():
    # Each bucket's second all-reduce is issued as its first completes: on gloo the ranks
    # issued them in different orders and waited on each other for ever (ResNet-20 did).
    ranks = run_ranks(_powersgd_over_two_buckets, world_size=2)
    for a, b in zip(ranks[0], ranks[1], strict=True):
        assert torch.equal(a, b)


def _powersgd_step3(rank: int, world_size: int) -> dict[str, list[torch.Tensor]]:
    template = small_bn_net()
    config = config_for("powersgd", powersgd_rank=1, powersgd_start_iter=2)
    tr = trainer(rank, world_size, config, copy.deepcopy(template), 1)
    plain = [backward_gradients(tr) for _ in range(2)][-1]  # torch's all-reduce warm-up steps
    compressed = backward_gradients(tr)
    del tr
    gc.collect()
    mean = mean_over_ranks(local_gradients(rank, template))
    return {"plain": plain, "compressed": compressed, "mean": mean}


@pytest.fixture(scope="module")
def powersgd_steps() -> list[dict[str, list[torch.Tensor]]]:
    return run_ranks(_powersgd_step3, world_size=2)


def test_powersgd_warm_up_steps_are_plain_all_reduce(powersgd_steps):
    for plain, mean in zip(powersgd_steps[0]["plain"], powersgd_steps[0]["mean"], strict=True):
        torch.testing.assert_close(plain, mean)


def test_powersgd_is_a_rank_r_orthogonal_projection_of_the_mean_gradient(powersgd_steps):
    # PowerSGD returns P P^T M for the averaged gradient matrix M and an orthonormal P with r
    # columns (error feedback is zero on the first compressed step). That is the bound: the
    # result has rank <= r, the error is orthogonal to it, so |M - P P^T M| <= |M| (and
    # <M, result> = |result|^2). Vectors (biases, BatchNorm) are sent uncompressed: exact.
    compressed, mean = powersgd_steps[0]["compressed"], powersgd_steps[0]["mean"]
    matrices = 0
    for ours, exact in zip(compressed, mean, strict=True):
        if exact.dim() == 1:
            torch.testing.assert_close(ours, exact)
            continue
        matrices += 1
        m, approx = exact.reshape(exact.shape[0], -1), ours.reshape(exact.shape[0], -1)
        assert torch.linalg.matrix_rank(approx) <= 1
        assert float(torch.dot(m.flatten(), approx.flatten())) == pytest.approx(
            float(approx.norm() ** 2), rel=1e-4
        )
        assert (m - approx).norm() < m.norm()
        assert not torch.allclose(approx, m, atol=1e-6)  # it did compress
    assert matrices == 2
    for a, b in zip(compressed, powersgd_steps[1]["compressed"], strict=True):
        torch.testing.assert_close(a, b)  # the same update on every rank
