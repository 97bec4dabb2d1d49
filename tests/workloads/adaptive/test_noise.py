"""The noise-scale formulas against their expectations, Monte Carlo and brute force."""

from __future__ import annotations

import math

import pytest
import torch

from workloads.adaptive.noise import (
    Ema,
    NoiseEstimates,
    NoiseScale,
    effective_batches,
    simple_estimates,
    worker_variance,
)


def test_estimates_recover_the_truth_from_the_expected_norms():
    grad_sq, trace, b, big = 2.5, 40.0, 8, 32
    small_sq, big_sq = grad_sq + trace / b, grad_sq + trace / big  # McCandlish A.1
    est = simple_estimates(small_sq, big_sq, b, big)
    assert est.grad_sq == pytest.approx(grad_sq)
    assert est.trace_sigma == pytest.approx(trace)


def test_estimates_refuse_equal_batches():
    with pytest.raises(ValueError, match="b < B"):
        simple_estimates(1.0, 1.0, 8, 8)


def _gaussian_trials(trials: int, world: int, batch: int, dim: int, seed: int):
    """Per-sample gradients G + N(0, diag(sigma^2)), averaged per worker, many trials at once."""
    gen = torch.Generator().manual_seed(seed)
    true_g = torch.linspace(-0.3, 0.5, dim, dtype=torch.float64)
    sigma = torch.linspace(0.5, 2.0, dim, dtype=torch.float64)
    samples = true_g + sigma * torch.randn(
        trials, world, batch, dim, generator=gen, dtype=torch.float64
    )
    local = samples.mean(dim=2)  # [trials, world, dim]: each worker's mean gradient
    return true_g, sigma, local


def test_estimates_are_unbiased_on_gaussian_per_sample_gradients():
    world, batch = 4, 8
    true_g, sigma, local = _gaussian_trials(4000, world, batch, 20, seed=1)
    small_sq = local.square().sum(-1).mean(-1)  # mean over workers of |g_w|^2
    big_sq = local.mean(1).square().sum(-1)  # |mean_w g_w|^2
    est = [
        simple_estimates(float(s), float(g), batch, batch * world)
        for s, g in zip(small_sq, big_sq, strict=True)
    ]
    g2 = torch.tensor([e.grad_sq for e in est])
    tr = torch.tensor([e.trace_sigma for e in est])

    def se(x: torch.Tensor) -> float:
        return float(x.std()) / math.sqrt(len(x))

    assert abs(float(g2.mean()) - float(true_g.square().sum())) < 4 * se(g2)
    assert abs(float(tr.mean()) - float(sigma.square().sum())) < 4 * se(tr)


def test_unequal_local_batches_are_unbiased_with_the_harmonic_mean():
    gen = torch.Generator().manual_seed(2)
    dim, trials, batches = 10, 6000, [4, 8, 16]
    true_g = torch.full((dim,), 0.4, dtype=torch.float64)
    sigma = 1.5
    local = torch.stack(
        [
            (true_g + sigma * torch.randn(trials, b, dim, generator=gen, dtype=torch.float64)).mean(
                1
            )
            for b in batches
        ],
        dim=1,
    )  # [trials, world, dim], worker w averaging batches[w] samples
    small, big = effective_batches(batches)
    assert small == pytest.approx(3 / (1 / 4 + 1 / 8 + 1 / 16))
    assert big == pytest.approx(3 * small)
    small_sq = local.square().sum(-1).mean(-1)
    big_sq = local.mean(1).square().sum(-1)
    tr = torch.tensor(
        [
            simple_estimates(float(s), float(g), small, big).trace_sigma
            for s, g in zip(small_sq, big_sq, strict=True)
        ]
    )
    assert abs(float(tr.mean()) - sigma**2 * dim) < 4 * float(tr.std()) / math.sqrt(trials)


def _per_sample_gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Brute force: one backward pass per sample, the gradients flattened into rows."""
    rows = []
    for i in range(len(x)):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        rows.append(torch.cat([p.grad.flatten() for p in model.parameters()]).double())
    return torch.stack(rows)


def test_smoothed_noise_scale_of_a_real_model_matches_brute_force():
    torch.manual_seed(0)
    x, y = torch.randn(256, 6), torch.randint(0, 3, (256,))
    model = torch.nn.Linear(6, 3)
    per_sample = _per_sample_gradients(model, x, y)
    true_g = per_sample.mean(0)
    true_trace = (per_sample - true_g).square().sum(1).mean()  # tr(Sigma) of one sample
    # A batch gradient is the mean of its per-sample gradients (checked on one batch), so the
    # data-parallel readings can be drawn from the rows: W workers of b samples each.
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x[:16]), y[:16]).backward()
    batch_grad = torch.cat([p.grad.flatten() for p in model.parameters()]).double()
    torch.testing.assert_close(batch_grad, per_sample[:16].mean(0))
    gen = torch.Generator().manual_seed(3)
    world, batch = 4, 16
    noise = NoiseScale.start(decay=0.999)
    for _ in range(3000):
        index = torch.randint(0, 256, (world, batch), generator=gen)  # with replacement: iid
        local = per_sample[index].mean(1)
        est = simple_estimates(
            float(local.square().sum(1).mean()),
            float(local.mean(0).square().sum()),
            batch,
            world * batch,
        )
        noise = noise.update(est)
    assert noise.b_noise == pytest.approx(float(true_trace / true_g.square().sum()), rel=0.1)


def test_worker_variance_equals_the_sample_variance_of_the_gradients():
    gen = torch.Generator().manual_seed(4)
    grads = torch.randn(5, 30, generator=gen, dtype=torch.float64)
    mean = grads.mean(0)
    brute = float((grads - mean).square().sum(1).sum() / 4)
    got = worker_variance([float(g.square().sum()) for g in grads], float(mean.square().sum()))
    assert got == pytest.approx(brute)


def test_worker_variance_needs_two_workers():
    with pytest.raises(ValueError, match="at least 2"):
        worker_variance([1.0], 1.0)


def test_ema_starts_at_its_first_value_and_then_mixes():
    ema = Ema(0.9).update(10.0)
    assert ema.value == 10.0
    assert ema.update(0.0).value == pytest.approx(9.0)


def test_ema_ignores_non_finite_samples():
    ema = Ema(0.5).update(2.0)
    assert ema.update(math.inf).value == 2.0
    assert ema.update(math.nan).value == 2.0


def test_ema_counts_the_values_it_took_and_the_noise_scale_its_readings():
    ema = Ema(0.5).update(2.0).update(math.nan).update(3.0)
    assert ema.count == 2
    noise = NoiseScale.start(0.9)
    for _ in range(3):
        noise = noise.update(NoiseEstimates(grad_sq=1.0, trace_sigma=5.0))
    assert noise.readings == 3


def test_noise_scale_is_unknown_while_the_smoothed_gradient_is_not_positive():
    noise = NoiseScale.start(0.5).update(NoiseEstimates(grad_sq=-1.0, trace_sigma=5.0))
    assert noise.b_noise is None
    noise = noise.update(NoiseEstimates(grad_sq=5.0, trace_sigma=10.0))  # EMA now 2.0
    assert noise.b_noise == pytest.approx(7.5 / 2.0)
