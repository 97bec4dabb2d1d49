"""`precision=bf16` for the classification tasks (workloads/runtime/precision.py): forward passes in
bf16 under autocast, in training and evaluation, the loss and the weights in fp32, and the
choice recorded; fp32 (the default) untouched. Each case builds the task as a run does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from runner.job.benchmarks import CNN_DIGITS, LOGREG_EPSILON
from tests.datagen import write_epsilon
from tests.distributed import run_ranks
from workloads import tasks
from workloads.telemetry.mllog import EventLog
from workloads.telemetry.timing import CpuClock
from workloads.training.loop import evaluate_metrics, train_step


def _build(config: Any) -> Any:
    context = tasks.Context(config, 0, 1, torch.device("cpu"), CpuClock(), EventLog(None, None))
    return tasks.build(context)


def _digits_step_and_evaluation(rank: int, world_size: int, precision: str) -> dict[str, Any]:
    """One training step and one evaluation of cnn-digits; the dtypes its layers computed in."""
    task = _build(CNN_DIGITS.config.replace(precision=precision))
    tr = task.current_trainer()
    seen: dict[str, set[str]] = {"train": set(), "eval": set()}
    phase = "train"

    def record(module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
        seen[phase].add(f"{type(module).__name__} {output.dtype}")

    model = tr.strategy.inner
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
            module.register_forward_hook(record)
    before = [p.detach().clone() for p in model.parameters()]
    loss = train_step(tr, torch.arange(64), 0.0, 0)
    tr.timer.finish()
    phase = "eval"
    metrics = evaluate_metrics(tr)
    out = {
        "precision": task.precision,
        "seen": seen,
        "loss dtype": str(loss.dtype),
        "loss": float(loss),
        "accuracy": metrics.accuracy,
        "eval loss": metrics.loss,
        "weights": {str(p.dtype) for p in model.parameters()},
        "trained": all(
            not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
        ),
    }
    task.close()
    return out


@pytest.fixture(scope="module")
def digits() -> dict[str, dict[str, Any]]:
    return {
        precision: run_ranks(_digits_step_and_evaluation, world_size=1, precision=precision)[0]
        for precision in ("bf16", "auto")
    }


def test_a_bf16_run_computes_its_layers_in_bf16_in_training_and_evaluation(digits):
    run = digits["bf16"]
    assert run["precision"] == "bf16"  # what the summary records (workloads/training/run.py)
    expected = {"Conv2d torch.bfloat16", "Linear torch.bfloat16"}
    assert run["seen"] == {"train": expected, "eval": expected}


def test_a_bf16_run_keeps_its_loss_and_weights_in_fp32_and_trains(digits):
    run = digits["bf16"]
    assert run["loss dtype"] == "torch.float32" and run["weights"] == {"torch.float32"}
    assert run["trained"]
    # Close to the fp32 run's from the same start: the same model, in another arithmetic.
    assert run["loss"] == pytest.approx(digits["auto"]["loss"], rel=0.05)
    assert 0.0 <= run["accuracy"] <= 1.0 and run["eval loss"] > 0


def test_by_default_an_image_model_computes_in_fp32(digits):
    run = digits["auto"]
    assert run["precision"] == "fp32"
    expected = {"Conv2d torch.float32", "Linear torch.float32"}
    assert run["seen"] == {"train": expected, "eval": expected}


def _logreg_gradient_source(rank: int, world_size: int, data_dir: str) -> dict[str, Any]:
    """Whether logistic regression's step went through autograd, per precision."""
    out = {}
    for precision in ("fp32", "bf16"):
        config = LOGREG_EPSILON.config.replace(data_dir=data_dir, precision=precision)
        task = _build(config)
        tr = task.current_trainer()
        autograd_calls: list[torch.Tensor] = []
        tr.strategy.inner.linear.weight.register_hook(autograd_calls.append)
        train_step(tr, slice(0, 50), 0.0, 0)
        tr.timer.finish()
        closed_form = tr.closed_form is not None
        out[precision] = {"closed form": closed_form, "autograd": len(autograd_calls)}
        task.close()
    return out


def test_logistic_regression_in_bf16_trains_through_autograd_not_its_fp32_closed_form(
    tmp_path: Path,
):
    write_epsilon(tmp_path, 100, 20)
    (got,) = run_ranks(_logreg_gradient_source, world_size=1, data_dir=str(tmp_path))
    assert got["fp32"] == {"closed form": True, "autograd": 0}
    assert got["bf16"] == {"closed form": False, "autograd": 1}
