import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from workloads.compiling import batch_sizes, compile_model, precompile


@pytest.mark.parametrize(
    ("num_samples", "batch_size", "expected"),
    [(100, 32, {32, 4}), (64, 32, {32}), (10, 32, {10}), (0, 32, set())],
)
def test_batch_sizes_are_the_full_batch_and_the_remainder(num_samples, batch_size, expected):
    assert batch_sizes(num_samples, batch_size) == expected


@pytest.mark.slow
def test_after_precompile_training_and_evaluation_compile_nothing_and_the_state_is_kept():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 3))
    compiled = compile_model(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    precompile(compiled, (1, 8, 8), {16, 5}, {64, 7})
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters()) and compiled.training
    graphs = counters["stats"]["unique_graphs"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in (16, 16, 5):  # an epoch: full batches, then the short one
        compiled(torch.randn(n, 1, 8, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    compiled.eval()
    with torch.no_grad():
        compiled(torch.randn(64, 1, 8, 8))
        compiled(torch.randn(7, 1, 8, 8))
    assert counters["stats"]["unique_graphs"] == graphs  # no compilation inside the clock
