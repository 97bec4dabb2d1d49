"""The pure pieces of the language-modelling and translation tasks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from workloads import tasks
from workloads.tasks.language_model import (
    asgd_due,
    batchify,
    bptt_windows,
    perplexity,
    rank_share,
)
from workloads.tasks.translation import eval_order, label_smoothed_loss

PAD = 0


def test_label_smoothed_loss_without_smoothing_is_the_token_nll_over_real_tokens():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    target = torch.tensor([[4, 5, 3, PAD], [6, 3, PAD, PAD]])
    smoothed, nll, tokens = label_smoothed_loss(logits, target, 0.0, PAD)
    want = F.cross_entropy(
        logits.reshape(-1, 7), target.reshape(-1), ignore_index=PAD, reduction="sum"
    )
    assert tokens == 5
    torch.testing.assert_close(nll, want)
    torch.testing.assert_close(smoothed, want)


def test_label_smoothing_mixes_the_nll_with_the_mean_over_the_vocabulary():
    torch.manual_seed(1)
    logits = torch.randn(1, 3, 5)
    target = torch.tensor([[2, 4, PAD]])
    smoothed, nll, _ = label_smoothed_loss(logits, target, 0.1, PAD)
    lprobs = F.log_softmax(logits, dim=-1)[0, :2]
    picked = -lprobs[torch.arange(2), target[0, :2]]
    want = (0.9 * picked + 0.1 * -lprobs.mean(dim=-1)).sum()
    torch.testing.assert_close(smoothed, want)
    torch.testing.assert_close(nll, picked.sum())
    # Equal to PyTorch's own label smoothing (which spreads epsilon the same way).
    torch_ls = F.cross_entropy(logits[0, :2], target[0, :2], label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(smoothed, torch_ls)


def test_bptt_windows_tile_the_stream_reproducibly_within_the_reference_bounds():
    windows = bptt_windows(10_000, 70, seed=3, epoch=0)
    starts = [s for s, _ in windows]
    lengths = [n for _, n in windows]
    assert starts[0] == 0
    assert all(a + n == b for (a, n), b in zip(windows, starts[1:], strict=False))
    assert starts[-1] + lengths[-1] <= 10_000 - 1  # every window has its next-token targets
    assert all(1 <= n <= 110 for n in lengths) and min(lengths[:-1]) >= 5
    assert abs(np.mean(lengths) - 70 * 0.975) < 3  # 95% around 70, 5% around 35
    assert windows == bptt_windows(10_000, 70, seed=3, epoch=0)
    assert windows != bptt_windows(10_000, 70, seed=3, epoch=1)


def test_batchify_cuts_the_stream_into_parallel_columns():
    data = batchify(np.arange(23), 4)
    assert data.shape == (5, 4)
    assert data[:, 1].tolist() == [5, 6, 7, 8, 9]  # column j: the j-th consecutive part


def test_rank_shares_are_disjoint_contiguous_and_equal():
    tokens = np.arange(101)
    shares = [rank_share(tokens, 3, r) for r in range(3)]
    assert [len(s) for s in shares] == [33, 33, 33]
    assert np.array_equal(np.concatenate(shares), np.arange(99))


def test_eval_order_splits_the_test_set_into_disjoint_covering_shares():
    lengths = np.array([5, 1, 9, 3, 3, 7, 2])
    shares = [eval_order(lengths, 3, r) for r in range(3)]
    assert sorted(np.concatenate(shares).tolist()) == list(range(7))


def test_perplexity_is_the_exponential_of_the_mean_nll_and_does_not_overflow():
    assert perplexity(np.log(42.0)) == pytest.approx(42.0)
    assert np.isfinite(perplexity(10_000.0))


@pytest.mark.parametrize(
    ("metric", "value", "target", "met"),
    [
        ("top1_accuracy", 0.81, 0.80, True),
        ("top1_accuracy", 0.79, 0.80, False),
        ("bleu", 25.0, 25.0, True),
        ("perplexity", 69.0, 70.0, True),
        ("perplexity", 71.0, 70.0, False),
    ],
)
def test_a_target_is_met_in_the_metrics_direction(metric, value, target, met):
    assert tasks.reached(metric, value, target) is met


def test_the_best_evaluation_follows_the_metrics_direction():
    evals = [{"value": 80.0}, {"value": 65.0}, {"value": 72.0}]
    assert tasks.best_of("perplexity", evals) == {"value": 65.0}
    assert tasks.best_of("bleu", evals) == {"value": 80.0}
    assert tasks.best_of("bleu", []) is None


@pytest.mark.parametrize(
    ("previous", "loss", "due"),
    [
        ([5.0, 4.0, 3.0, 2.9, 2.8, 2.7], 5.1, True),  # worse than 5.0, the best before the 5
        ([5.0, 4.0, 3.0, 2.9, 2.8, 2.7], 5.0, False),  # not worse than it
        ([5.0, 4.0, 3.0, 2.9, 2.8, 2.7], 4.9, False),
        ([5.0, 4.0, 3.0, 2.9, 2.8], 9.0, False),  # only 5 so far: never before the 6th
        ([3.0, 4.0, 4.1, 4.2, 4.3, 4.4, 4.5], 3.5, True),  # stalled since the first
    ],
)
def test_nt_asgd_triggers_when_validation_is_worse_than_the_best_before_the_last_5(
    previous, loss, due
):
    assert asgd_due(previous, loss, 5) is due
