"""A run whose loss or averaged gradient stops being finite ends at once, FAILED, and says
where; the step's update is never applied."""

from __future__ import annotations

import math

import pytest
import torch

from contract.events import RUN_STOP, read_events
from contract.rundir import JobState
from contract.summary import TrainSummary
from runner import api
from runner.results import rundir
from tests.conftest import submit_local
from workloads.divergence import Diverged, check
from workloads.sgd import FusedSGD


def _optimizer_with_grads(grad: float) -> FusedSGD:
    model = torch.nn.Linear(2, 1)
    for p in model.parameters():
        p.grad = torch.full_like(p, grad)
    return FusedSGD(model.parameters(), lr=0.1)


def test_a_finite_step_passes():
    check(torch.tensor(0.5), _optimizer_with_grads(1.0), epoch=1, step=1)


@pytest.mark.parametrize(
    ("loss", "grad", "what"),
    [(math.nan, 1.0, "loss nan"), (math.inf, 1.0, "loss inf"), (1.0, math.nan, "gradient")],
)
def test_a_non_finite_loss_or_gradient_is_divergence_naming_where(loss, grad, what):
    with pytest.raises(Diverged, match=rf"diverged at epoch 3, step 41: {what}"):
        check(torch.tensor(loss), _optimizer_with_grads(grad), epoch=3, step=41)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_one_bad_element_of_any_dtype_among_mixed_gradients_is_found(bad, dtype):
    params = [
        torch.nn.Parameter(torch.zeros(3, 4)),
        torch.nn.Parameter(torch.zeros(5, dtype=dtype)),
    ]
    params[0].grad = torch.randn(3, 4)
    params[1].grad = torch.randn(5).to(dtype)
    params[1].grad[3] = bad
    with pytest.raises(Diverged, match="gradient not finite"):
        check(torch.tensor(0.5), FusedSGD(params, lr=0.1), epoch=1, step=1)


def test_the_check_leaves_every_gradient_as_it_was():
    params = [torch.nn.Parameter(torch.zeros(64)), torch.nn.Parameter(torch.zeros(8).half())]
    params[0].grad = torch.randn(64) * 1e30
    params[1].grad = torch.randn(8).half()
    before = [p.grad.clone() for p in params]
    check(torch.tensor(0.5), FusedSGD(params, lr=0.1), epoch=1, step=1)
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.grad, b)


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
