"""A run whose loss or averaged gradient stops being finite ends, FAILED, and says where.
Each step checks the loss and one weight the update wrote (the sentinel): a non-finite loss
on any rank makes every element of the averaged gradient non-finite, so the sentinel of every
benchmark model, under every optimizer, is held here to turn non-finite at that step. Every
weight is read every WEIGHTS_EVERY_STEPS steps and at the run's end, which finds a single bad
element; that pass is held here under every optimizer and dtype."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from contract.events import RUN_STOP, read_events
from contract.rundir import JobState
from contract.summary import TrainSummary
from runner import api
from runner.job.benchmarks import BENCHMARKS, CNN_DIGITS
from runner.results import rundir
from tests.conftest import submit_local
from workloads import models
from workloads.optimization.sgd import FusedSGD
from workloads.training.divergence import (
    WEIGHTS_EVERY_STEPS,
    Diverged,
    check,
    check_all_weights,
    forget,
)

OPTIMIZERS = {
    "sgd": {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-4},
    "sgd-plain": {"momentum": 0.0},
    "adam": {},
}
PASS = WEIGHTS_EVERY_STEPS  # a step whose check reads every weight


def _stepped(grad: float, optimizer: str = "sgd-plain", clip_norm: float | None = None) -> Any:
    """A model's optimizer after one update on gradients `grad` everywhere but one element,
    which is 1.0 (so one bad element, not a whole tensor, is what the check must find)."""
    model = torch.nn.Linear(3, 2)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    model.weight.grad[1, 2] = grad
    name = optimizer.removesuffix("-plain")
    config = CNN_DIGITS.config.replace(optimizer=name, **OPTIMIZERS[optimizer])
    step = config.build_optimizer(model.parameters())
    if clip_norm is not None:  # as the sequence tasks clip, between backward and the update
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    step.step()
    return step


@pytest.mark.parametrize("step", [1, PASS])
def test_a_finite_step_passes(step):
    check(torch.tensor(0.5), _stepped(1.0), epoch=1, step=step)


@pytest.mark.parametrize(("loss", "what"), [(math.nan, "loss nan"), (math.inf, "loss inf")])
def test_a_non_finite_loss_is_divergence_at_that_step_naming_where(loss, what):
    with pytest.raises(Diverged, match=rf"diverged at epoch 3, step 41: {what}"):
        check(torch.tensor(loss), _stepped(1.0), epoch=3, step=41)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_one_bad_gradient_element_is_found_by_the_pass_over_every_weight(bad, optimizer):
    optimizer_ = _stepped(bad, optimizer)
    check(torch.tensor(0.5), optimizer_, epoch=1, step=PASS + 1)  # the sentinel is not it
    match = rf"step {2 * PASS}: weights not finite \(found by the pass over every weight each"
    with pytest.raises(Diverged, match=match):
        check(torch.tensor(0.5), optimizer_, epoch=1, step=2 * PASS)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_bad_gradient_element_survives_clipping_to_the_weights(bad):
    with pytest.raises(Diverged, match="weights not finite"):
        check(torch.tensor(0.5), _stepped(bad, "sgd", clip_norm=0.25), epoch=1, step=PASS)


def test_a_zero_size_last_parameter_leaves_the_sentinel_on_the_last_weight_with_elements():
    model = torch.nn.Linear(3, 2)
    empty = torch.nn.Parameter(torch.empty(0))  # last in the optimizer, with nothing to read
    optimizer = FusedSGD([*model.parameters(), empty], lr=0.1)
    with torch.no_grad():
        model.bias.fill_(math.nan)  # as a NaN gradient leaves the output layer after an update
    with pytest.raises(Diverged, match="step 1: weights not finite after the update"):
        check(torch.tensor(0.5), optimizer, epoch=1, step=1)  # a step, not a pass


def test_the_weights_are_read_whole_before_the_record_and_only_this_runs():
    forget()
    bad = _stepped(math.nan)
    check(torch.tensor(0.5), bad, epoch=1, step=1)  # seen, its bad element not yet found
    with pytest.raises(Diverged, match="diverged by the end of training: weights not finite"):
        check_all_weights("by the end of training")
    forget()  # the next run: an earlier run's optimizer is not its to answer for
    check(torch.tensor(0.5), _stepped(1.0), epoch=1, step=1)
    check_all_weights("by the end of training")


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
        check(torch.tensor(0.5), FusedSGD(params, lr=0.1), epoch=1, step=PASS)


def test_the_check_leaves_every_weight_as_it_was():
    params = [torch.nn.Parameter(torch.randn(64) * 1e30), torch.nn.Parameter(torch.randn(8).half())]
    before = [p.detach().clone() for p in params]
    check(torch.tensor(0.5), FusedSGD(params, lr=0.1), epoch=1, step=PASS)  # no false alarm
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)


def _classifier_loss(benchmark: str, classes: int, shape: tuple[int, ...]) -> Any:
    def build() -> tuple[torch.nn.Module, torch.Tensor]:
        model = models.build(BENCHMARKS[benchmark].config.model, classes, shape)
        out, labels = model(torch.randn(4, *shape)), torch.arange(4) % classes
        if out.dim() == 1:  # logistic regression: one logit a sample
            return model, F.binary_cross_entropy_with_logits(out, labels.float())
        return model, F.cross_entropy(out, labels)

    return build


def _awd_lstm() -> tuple[torch.nn.Module, torch.Tensor]:
    from workloads.models.awd_lstm.model import AWDLSTM

    model = AWDLSTM(50, embed_dim=8, hidden_dim=12)
    tokens = torch.randint(0, 10, (5, 2))  # a few of the 50 words: the others' rows get nothing
    logits = model(tokens, model.init_hidden(2, "cpu"))[0]
    return model, F.cross_entropy(logits.reshape(-1, 50), torch.randint(0, 10, (10,)))


def _seq2seq(kind: str) -> Any:
    def build() -> tuple[torch.nn.Module, torch.Tensor]:
        from workloads.models.gnmt.model import GNMT
        from workloads.models.seq2seq import make_tgt_in
        from workloads.models.transformer.model import Transformer

        if kind == "gnmt":
            model: torch.nn.Module = GNMT(37, hidden_dim=12, num_layers=4)
        else:
            model = Transformer(37, d_model=16, ffn_dim=32, num_heads=4, num_layers=2)
        src, target = torch.randint(4, 12, (2, 6)), torch.randint(4, 12, (2, 5))
        logits = model(src, torch.tensor([6, 4]), make_tgt_in(target))
        return model, F.cross_entropy(logits.reshape(-1, 37), target.reshape(-1))

    return build


MODELS = {
    "cnn-digits": _classifier_loss("cnn-digits", 10, (1, 8, 8)),
    "resnet20-cifar10": _classifier_loss("resnet20-cifar10", 10, (3, 32, 32)),
    "vgg11-cifar10": _classifier_loss("vgg11-cifar10", 10, (3, 32, 32)),
    "logreg-epsilon": _classifier_loss("logreg-epsilon", 2, (20,)),
    "lstm-wikitext2": _awd_lstm,
    "gnmt-wmt16": _seq2seq("gnmt"),
    "transformer-wmt17": _seq2seq("transformer"),
}


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("benchmark", MODELS)
def test_a_non_finite_loss_on_any_rank_reaches_every_models_sentinel_at_that_step(
    benchmark, optimizer
):
    """What a rank whose loss is NaN sends into the average, and so what every rank (its own
    loss finite) updates with: its gradient, NaN wherever backward reaches. The sentinel,
    read at a step with no pass over every weight, must find it there."""
    torch.manual_seed(0)
    model, loss = MODELS[benchmark]()
    (loss * math.nan).backward()
    name = optimizer.removesuffix("-plain")
    config = CNN_DIGITS.config.replace(optimizer=name, **OPTIMIZERS[optimizer])
    step = config.build_optimizer(model.parameters())
    step.step()
    with pytest.raises(Diverged, match="step 1: weights not finite after the update"):
        check(torch.tensor(0.5), step, epoch=1, step=1)


def _first_step_with_rank_1s_data_damaged(rank: int, world_size: int) -> str:
    """One real step of cnn-digits under DDP; rank 1's batch holds a NaN image, so only its
    loss is NaN. What each rank's check said."""
    from workloads import tasks
    from workloads.telemetry.mllog import EventLog
    from workloads.telemetry.timing import clock_for
    from workloads.training.loop import train_step

    device = torch.device("cpu")
    torch.manual_seed(0)
    context = tasks.Context(CNN_DIGITS.config, rank, world_size, device, clock_for(device),
                            EventLog(None, None))  # fmt: skip
    trainer = tasks.build(context).current_trainer()  # type: ignore[attr-defined]
    index = torch.arange(8)
    if rank == 1:
        trainer.splits.train_x[index[3]] = math.nan
    try:
        train_step(trainer, index, 0.0, 0)
    except Diverged as err:
        return str(err)
    finally:
        trainer.timer.finish()
    return "no divergence"


def test_a_nan_loss_on_one_rank_stops_every_rank_at_that_step():
    """Under an exact strategy the peers' losses are finite; the averaged gradient they update
    with is not, and their sentinels say so at the same step: every rank stops together, so
    rank 0 can record the run (it would otherwise enter the next step's collective alone)."""
    from tests.distributed import run_ranks

    said = run_ranks(_first_step_with_rank_1s_data_damaged)
    assert said == [
        "diverged at epoch 1, step 1: weights not finite after the update",
        "diverged at epoch 1, step 1: loss nan",
    ]


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
