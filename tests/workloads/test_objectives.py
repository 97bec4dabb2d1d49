import math

import pytest
import torch

from runner.job.benchmarks import BENCHMARKS
from workloads.models.logreg.model import LogisticRegression
from workloads.optimization.objectives import CrossEntropy, RegularizedLogistic


def test_a_logistic_steps_reported_loss_is_log_one_plus_exp_of_minus_margin_plus_half_l2():
    model = LogisticRegression(3)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        model.linear.bias.fill_(0.25)
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    y = torch.tensor([1.0, 0.0])  # signs +1, -1
    margins = [1.0 * (1 + 1 + 0.25), -1.0 * (-2 + 0.25)]
    data_term = sum(math.log1p(math.exp(-m)) for m in margins) / 2
    l2 = 1e-2 / 2 * (1 + 4 + 0.25 + 0.0625)
    objective = RegularizedLogistic(model.parameters(), 1e-2)
    loss = objective.loss(model(x), y)  # what backward sees: the data term
    assert loss.item() == pytest.approx(data_term, rel=1e-6)
    assert loss.item() + objective.penalty_sum() == pytest.approx(data_term + l2, rel=1e-6)
    assert objective.penalty_sum() == 0.0  # taken: the next epoch starts from nothing


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_steps_with_the_l2_gradient_in_the_optimizer_match_autograd_on_the_whole_loss(optimizer):
    """Three steps as the loop takes them (the penalty's gradient as weight decay) against
    three steps of plain autograd on data term + l2_rate / 2 * ||params||^2."""
    config = BENCHMARKS["logreg-epsilon"].config.replace(l2_rate=0.1, lr=0.5, optimizer=optimizer)
    torch.manual_seed(0)
    ours, plain = LogisticRegression(5), LogisticRegression(5)
    with torch.no_grad():
        for p, q in zip(ours.parameters(), plain.parameters(), strict=True):
            p.normal_()
            q.copy_(p)
    objective = config.model.objective(ours)
    step = config.build_optimizer(ours.parameters())
    reference = config.replace(l2_rate=0.0)  # no weight decay of its own
    plain_step = reference.build_optimizer(plain.parameters())
    reported, expected = 0.0, 0.0
    for _ in range(3):
        x, y = torch.randn(8, 5), (torch.rand(8) > 0.5).float()
        loss = objective.loss(ours(x), y)
        loss.backward()
        step.step()
        step.zero_grad()
        reported += float(loss.detach())
        whole = torch.nn.functional.binary_cross_entropy_with_logits(plain(x), y)
        whole = whole + 0.1 / 2 * sum(p.pow(2).sum() for p in plain.parameters())
        whole.backward()
        plain_step.step()
        plain_step.zero_grad()
        expected += float(whole.detach())
    for p, q in zip(ours.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    assert reported + objective.penalty_sum() == pytest.approx(expected, rel=1e-6)


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
    assert isinstance(logreg.model.objective(LogisticRegression(3)), RegularizedLogistic)
    assert isinstance(resnet.model.objective(LogisticRegression(3)), CrossEntropy)
