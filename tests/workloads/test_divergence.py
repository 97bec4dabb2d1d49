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
