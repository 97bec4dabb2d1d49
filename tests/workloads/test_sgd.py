"""workloads/sgd.py's FusedSGD against torch.optim.SGD(fused=True): the same kernel and
state, so the same weights bit for bit, and a run's start-up that never imports torch._dynamo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from runner.job.benchmarks import BENCHMARKS
from workloads.sgd import FusedSGD


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8 * 36, 5))
    return model.to(memory_format=torch.channels_last)


def _train(model: nn.Module, optimizer: object, steps: range) -> None:
    for i in steps:
        torch.manual_seed(100 + i)
        x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
        for group in optimizer.param_groups:  # type: ignore[attr-defined]
            group["lr"] = 0.1 / (1 + i)  # the loops set each step's LR like this
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()  # type: ignore[attr-defined]
        optimizer.zero_grad(set_to_none=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "settings",
    [
        {"momentum": 0.0, "weight_decay": 0.0},
        {"momentum": 0.9, "weight_decay": 1e-4},
        {"momentum": 0.9, "weight_decay": 5e-4, "nesterov": True},
    ],
)
def test_weights_and_momentum_match_torchs_fused_sgd_bit_for_bit(settings):
    ours, theirs = _model(), _model()
    mine = FusedSGD(ours.parameters(), lr=0.1, **settings)
    reference = torch.optim.SGD(theirs.parameters(), lr=0.1, fused=True, **settings)
    _train(ours, mine, range(6))
    _train(theirs, reference, range(6))
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
        assert a.grad is None  # zero_grad(set_to_none=True)
    if settings["momentum"]:
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(mine.state[a]["momentum_buffer"],
                               reference.state[b]["momentum_buffer"])  # fmt: skip


def test_a_loaded_state_goes_on_exactly_as_the_original():
    settings = {"momentum": 0.9, "weight_decay": 1e-4}
    first = _model()
    original = FusedSGD(first.parameters(), lr=0.1, **settings)
    _train(first, original, range(3))
    second = _model(seed=1)
    second.load_state_dict(first.state_dict())
    resumed = FusedSGD(second.parameters(), lr=0.5, **settings)
    resumed.load_state_dict(original.state_dict())
    assert resumed.param_groups[0]["lr"] == original.param_groups[0]["lr"]
    _train(first, original, range(3, 6))
    _train(second, resumed, range(3, 6))
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    # torch's layout: parameters by position, so torch's optimizer takes our state too.
    reference = torch.optim.SGD(second.parameters(), lr=0.1, fused=True, **settings)
    reference.load_state_dict(resumed.state_dict())
    p = next(second.parameters())
    assert torch.equal(reference.state[p]["momentum_buffer"], resumed.state[p]["momentum_buffer"])


def test_a_state_of_other_parameters_is_refused():
    small = FusedSGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="other parameters"):
        small.load_state_dict(FusedSGD(_model().parameters(), lr=0.1).state_dict())


_RUN = """
import json, sys, tempfile
from one_process import run_quietly, single_rank_environment
from workloads.config import TrainConfig
single_rank_environment()
summary = run_quietly(TrainConfig.from_json(sys.argv[1]), "--open-division")
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules,
                  "trained": summary is not None and summary.steps > 0}))
"""


@pytest.mark.slow
def test_a_run_that_compiles_nothing_never_imports_torch_dynamo(tmp_path):
    config = BENCHMARKS["cnn-digits"].config.replace(max_epochs=1, stop_at_target=False)
    done = subprocess.run([sys.executable, "-c", _RUN, config.to_json()], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path.parent, env=_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"dynamo": False, "trained": True}


def _env() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.path.join(repo, "bench")])}
