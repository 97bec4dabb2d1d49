"""A run whose loss or averaged gradient stops being finite ends at once, FAILED, and says
where. The check runs right after the update, on the loss and the weights the update wrote:
a non-finite gradient must make them non-finite under every optimizer, which is held here."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from contract.events import RUN_STOP, read_events
from contract.rundir import JobState
from contract.summary import TrainSummary
from runner import api
from runner.job.benchmarks import CNN_DIGITS
from runner.results import rundir
from tests.conftest import submit_local
from workloads.divergence import Diverged, check
from workloads.optim import build_optimizer
from workloads.sgd import FusedSGD

OPTIMIZERS = {
    "sgd": {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-4},
    "sgd-plain": {"momentum": 0.0},
    "adam": {},
}


def _stepped(grad: float, optimizer: str = "sgd-plain", clip_norm: float | None = None) -> Any:
    """A model's optimizer after one update on gradients `grad` everywhere but one element,
    which is 1.0 (so one bad element, not a whole tensor, is what the check must find)."""
    model = torch.nn.Linear(3, 2)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    model.weight.grad[1, 2] = grad
    name = optimizer.removesuffix("-plain")
    config = CNN_DIGITS.config.replace(optimizer=name, **OPTIMIZERS[optimizer])
    step = build_optimizer(config, model.parameters())
    if clip_norm is not None:  # as the sequence tasks clip, between backward and the update
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    step.step()
    return step


def test_a_finite_step_passes():
    check(torch.tensor(0.5), _stepped(1.0), epoch=1, step=1)


@pytest.mark.parametrize(
    ("loss", "grad", "what"),
    [(math.nan, 1.0, "loss nan"), (math.inf, 1.0, "loss inf"), (1.0, math.nan, "weights")],
)
def test_a_non_finite_loss_or_gradient_is_divergence_naming_where(loss, grad, what):
    with pytest.raises(Diverged, match=rf"diverged at epoch 3, step 41: {what}"):
        check(torch.tensor(loss), _stepped(grad), epoch=3, step=41)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_one_bad_gradient_element_is_found_after_the_update_of_every_optimizer(bad, optimizer):
    with pytest.raises(Diverged, match="weights not finite after the update"):
        check(torch.tensor(0.5), _stepped(bad, optimizer), epoch=1, step=1)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_bad_gradient_element_survives_clipping_to_the_weights(bad):
    with pytest.raises(Diverged, match="weights not finite after the update"):
        check(torch.tensor(0.5), _stepped(bad, "sgd", clip_norm=0.25), epoch=1, step=1)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_bad_weight_of_a_low_precision_dtype_beside_float32_ones_is_found(bad, dtype):
    params = [
        torch.nn.Parameter(torch.zeros(3, 4)),
        torch.nn.Parameter(torch.zeros(5, dtype=dtype)),
    ]
    with torch.no_grad():
        params[1][3] = bad
    with pytest.raises(Diverged, match="weights not finite"):
        check(torch.tensor(0.5), FusedSGD(params, lr=0.1), epoch=1, step=1)


def test_the_check_leaves_every_weight_as_it_was():
    params = [torch.nn.Parameter(torch.randn(64) * 1e30), torch.nn.Parameter(torch.randn(8).half())]
    before = [p.detach().clone() for p in params]
    check(torch.tensor(0.5), FusedSGD(params, lr=0.1), epoch=1, step=1)  # no false alarm either
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)


@pytest.mark.slow
def test_a_diverging_run_is_failed_with_the_reason_and_its_summary_agrees(tmp_path):
    run = submit_local(tmp_path, ["lr=1000"])  # linear scaling: 2000 on 2 workers
    status = api.wait(tmp_path, run)
    assert status.state is JobState.FAILED
    assert status.exit_code == 3
    assert "diverged at epoch 1, step" in status.reason
    summary = rundir.read_summary(run.run_dir)
    assert isinstance(summary, TrainSummary)
    assert summary.status == "diverged" and summary.target_reached is False
    assert summary.diverged and summary.diverged in status.reason  # the state and the summary agree
    (stop,) = [e for e in read_events(run.run_dir / "events.jsonl") if e["key"] == RUN_STOP]
    assert stop["metadata"]["status"] == "aborted"
    # The steps before the diverged one are counted, though no epoch ended (it said 0 steps,
    # 0 samples, and booked the whole loop as `other`).
    step = int(summary.diverged.rsplit("step ", 1)[1].split(":")[0])
    assert step > 1 and summary.steps == step - 1 and summary.epochs == 0
    assert summary.train_samples == summary.steps * summary.global_batch_size
    assert summary.phase_shares["other"] < 0.5
