"""Logistic regression's closed-form gradient (workloads/models/logreg/model.py,
LinearLogistic) against autograd, and the loop's choice between them."""

from __future__ import annotations

import copy
import gc
from typing import Any

import pytest
import torch

from runner.job.benchmarks import LOGREG_EPSILON
from tests.distributed import run_ranks
from workloads import strategies
from workloads.data import Splits
from workloads.models.logreg.model import LogisticRegression
from workloads.telemetry.timing import CpuClock, StepTimer
from workloads.training.loop import Trainer, train_step

FEATURES, BATCH = 7, 16


def random_model(seed: int = 0) -> LogisticRegression:
    torch.manual_seed(seed)
    model = LogisticRegression(FEATURES)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()  # a zero start would make every logit 0: a weak comparison
    return model


def random_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, FEATURES, generator=generator)
    return x, (torch.rand(BATCH, generator=generator) > 0.5).float()


def test_the_loss_gradient_and_reported_penalty_are_autograds():
    config = LOGREG_EPSILON.config.replace(l2_rate=0.1)
    ours, theirs = random_model(), random_model()
    objective = config.model.objective(ours)
    closed_form = config.model.closed_form(ours, objective)
    assert closed_form is not None
    reference = config.model.objective(theirs)
    x, y = random_batch(1)
    loss = closed_form.forward(x, y)
    closed_form.backward()
    expected = reference.loss(theirs(x), y)
    expected.backward()
    assert not loss.requires_grad
    torch.testing.assert_close(loss, expected.detach())
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert p.grad is not None and p.grad.shape == p.shape
        torch.testing.assert_close(p.grad, q.grad)
    penalty = objective.penalty_sum()
    assert penalty == pytest.approx(reference.penalty_sum(), rel=1e-6) and penalty > 0


def test_it_adds_to_gradients_already_there_as_autograd_does():
    config = LOGREG_EPSILON.config
    ours, theirs = random_model(), random_model()
    closed_form = config.model.closed_form(ours, config.model.objective(ours))
    assert closed_form is not None
    reference = config.model.objective(theirs)
    for seed in (1, 2):
        x, y = random_batch(seed)
        closed_form.forward(x, y)
        closed_form.backward()
        reference.loss(theirs(x), y).backward()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def _steps_and_autograd_calls(rank: int, world_size: int) -> dict[str, Any]:
    """Two steps of logistic regression under an exchange after backward (the closed form)
    and under DDP (autograd: its exchange runs in autograd's hooks), from the same start on
    each rank's own data; how often autograd computed the weight's gradient in each."""
    template = random_model()
    out: dict[str, Any] = {}
    for name in ("allreduce", "ddp"):
        config = LOGREG_EPSILON.config.replace(strategy=name, l2_rate=0.01, lr=0.5)
        model = copy.deepcopy(template)
        objective = config.model.objective(model)
        clock = CpuClock()
        generator = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(2 * BATCH, FEATURES, generator=generator)
        y = (torch.rand(2 * BATCH, generator=generator) > 0.5).float()
        tr = Trainer(
            config, rank, world_size, torch.device("cpu"), Splits(x, y, x, y, num_classes=2),
            strategies.build(config.strategy, config.run.seed, model, clock),
            config.build_optimizer(model.parameters()),
            StepTimer(clock), torch.Generator(), objective,
            config.model.closed_form(model, objective),
        )  # fmt: skip
        autograd_calls: list[torch.Tensor] = []  # the weight's gradients autograd computed
        model.linear.weight.register_hook(autograd_calls.append)
        phases = []
        for i in range(2):
            train_step(tr, slice(i * BATCH, (i + 1) * BATCH), 0.0, i)
            phases.append(tr.timer.finish())
        out[name] = [p.detach().clone() for p in model.parameters()]
        out[f"{name} autograd calls"] = len(autograd_calls)
        out[f"{name} phases"] = phases
        del tr
        gc.collect()  # no DDP reducer may outlive its use (see tests/distributed.py)
    return out


@pytest.fixture(scope="module")
def two_ranks() -> list[dict[str, Any]]:
    return run_ranks(_steps_and_autograd_calls, world_size=2)


def test_an_exchange_after_backward_trains_in_closed_form_and_ddp_through_autograd(two_ranks):
    for rank in two_ranks:
        assert rank["allreduce autograd calls"] == 0
        assert rank["ddp autograd calls"] == 2


@pytest.mark.parametrize("rank", [0, 1])
def test_both_take_the_same_steps_on_the_averaged_gradient(two_ranks, rank):
    ours, ddp = two_ranks[rank]["allreduce"], two_ranks[rank]["ddp"]
    for p, q, start in zip(ours, ddp, random_model().parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        assert not torch.equal(p, start.detach())  # they moved
    for p, q in zip(ours, two_ranks[1 - rank]["allreduce"], strict=True):
        torch.testing.assert_close(p, q)  # the same on every rank: the gradients were averaged


def test_the_closed_forms_step_is_timed_in_the_same_phases(two_ranks):
    for phases in two_ranks[0]["allreduce phases"]:
        assert phases["forward"] > 0 and phases["backward"] > 0 and phases["communication"] > 0
