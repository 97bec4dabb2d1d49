import math

import pytest
import torch

from runner.job.benchmarks import BENCHMARKS
from workloads import objectives
from workloads.models.logreg.model import LogisticRegression
from workloads.objectives import CrossEntropy, RegularizedLogistic


def test_logistic_loss_is_log_one_plus_exp_of_minus_signed_margin_plus_half_l2():
    model = LogisticRegression(3)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        model.linear.bias.fill_(0.25)
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    y = torch.tensor([1.0, 0.0])  # signs +1, -1
    margins = [1.0 * (1 + 1 + 0.25), -1.0 * (-2 + 0.25)]
    data_term = sum(math.log1p(math.exp(-m)) for m in margins) / 2
    l2 = 1e-2 / 2 * (1 + 4 + 0.25 + 0.0625)
    loss = RegularizedLogistic(model.parameters(), 1e-2).loss(model(x), y)
    assert loss.item() == pytest.approx(data_term + l2, rel=1e-6)


def test_l2_term_contributes_l2_rate_times_the_weights_to_the_gradient():
    model = LogisticRegression(4)
    with torch.no_grad():
        model.linear.weight.fill_(2.0)
    objective = RegularizedLogistic(model.parameters(), 0.1)
    x, y = torch.zeros(5, 4), torch.ones(5)  # zero inputs: the data term has no weight gradient
    objective.loss(model(x), y).backward()
    assert torch.allclose(model.linear.weight.grad, torch.full((1, 4), 0.2))


def test_logistic_evaluation_counts_the_sign_of_the_logit_and_sums_unregularized_losses():
    logits, labels = torch.tensor([2.0, -1.0, 0.5, -3.0]), torch.tensor([1.0, 1.0, 0.0, 0.0])
    objective = RegularizedLogistic([torch.ones(3)], 1.0)  # the regularizer must not count
    loss_sum, correct = objective.eval_sums(logits, labels)
    expected = sum(math.log1p(math.exp(-m)) for m in (2.0, -1.0, -0.5, 3.0))
    assert int(correct) == 2 and float(loss_sum) == pytest.approx(expected, rel=1e-6)


def test_cross_entropy_evaluation_counts_arg_max_hits():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    loss_sum, correct = CrossEntropy().eval_sums(logits, torch.tensor([0, 1, 1]))
    assert int(correct) == 2
    expected = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 1]), reduction="sum")
    assert float(loss_sum) == pytest.approx(float(expected))


def test_build_picks_the_tasks_objective():
    logreg = BENCHMARKS["logreg-epsilon"].config
    resnet = BENCHMARKS["resnet20-cifar10"].config
    assert isinstance(objectives.build(logreg, LogisticRegression(3)), RegularizedLogistic)
    assert isinstance(objectives.build(resnet, LogisticRegression(3)), CrossEntropy)
