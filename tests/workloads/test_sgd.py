"""workloads/optimization/sgd.py's FusedSGD against torch.optim.SGD(fused=True): the same kernel and
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
from workloads.optimization.sgd import FusedSGD


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


class _LateBranch(nn.Module):
    """`late` is in the forward only from step 3 on (its gradient None until then), and
    `early` only before step 5 (its gradient None again after)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.base, self.late, self.early = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        y = self.base(x)
        y = self.late(y) if step >= 3 else y
        return self.early(y) if step < 5 else y


def _train_late(optimizer_of: object) -> tuple[nn.Module, object]:
    model = _LateBranch()
    optimizer = optimizer_of(model.parameters())  # type: ignore[operator]
    for i in range(8):
        torch.manual_seed(100 + i)
        model(torch.randn(4, 3), i).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model, optimizer


@pytest.mark.parametrize(
    "settings",
    [
        {"momentum": 0.0, "weight_decay": 1e-4},
        {"momentum": 0.9, "weight_decay": 1e-4},
        {"momentum": 0.9, "weight_decay": 5e-4, "nesterov": True},
    ],
)
def test_a_gradient_that_appears_late_starts_its_momentum_as_torchs_sgd_does(settings):
    # torch.optim.SGD(fused=True) itself fails here; its single-tensor SGD is the rule.
    ours, mine = _train_late(lambda p: FusedSGD(p, lr=0.1, **settings))
    theirs, reference = _train_late(lambda p: torch.optim.SGD(p, lr=0.1, foreach=False, **settings))
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b)
        if settings["momentum"]:
            torch.testing.assert_close(
                mine.state[a]["momentum_buffer"],  # type: ignore[attr-defined]
                reference.state[b]["momentum_buffer"],  # type: ignore[attr-defined]
            )


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


def _saved(momentum_buffer: object, **group: object) -> dict[str, object]:
    hyper = {"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0,
             "nesterov": False, **group}  # fmt: skip
    return {"state": {0: {"momentum_buffer": momentum_buffer}},
            "param_groups": [{**hyper, "params": [0]}]}  # fmt: skip


_DAMAGED = {
    "a smaller buffer": (_saved(torch.ones(3)), "momentum buffer of parameter 0 is \\[3\\]"),
    "a buffer of another shape": (_saved(torch.ones(4, 1)), "the parameter \\[4\\]"),
    "no tensor": (_saved([1.0, 2.0]), "unknown entry"),
    "an unknown entry": (
        {"state": {0: {"exp_avg": torch.ones(4)}}, "param_groups": [{"params": [0]}]},
        "unknown entry 'exp_avg'",
    ),
    "a parameter out of range": (
        {"state": {7: {"momentum_buffer": torch.ones(4)}}, "param_groups": [{"params": [0]}]},
        "parameter 7 is of no parameter",
    ),
    "a learning rate of text": (_saved(torch.ones(4), lr="0.1"), "lr is not"),
    "a learning rate nan": (_saved(torch.ones(4), lr=float("nan")), "lr is not"),
    "maximize": (_saved(torch.ones(4), maximize=True), "maximize is not"),
    # torch.optim.SGD refuses these at construction; taken, they amplified every step.
    "a negative momentum": (_saved(torch.ones(4), momentum=-3.0), "momentum is not"),
    "a negative learning rate": (_saved(torch.ones(4), lr=-0.1), "lr is not"),
    # The fused kernel failed on a sparse buffer at the next step, mid-run.
    "a sparse buffer": (_saved(torch.ones(4).to_sparse()), "not dense real numbers"),
    "a buffer without values": (_saved(torch.empty(4, device="meta")), "not dense real"),
    "a buffer of integers": (_saved(torch.ones(4, dtype=torch.int64)), "not dense real"),
    # Not an AttributeError or a KeyError from deep inside.
    "a state that is a list": ({"state": [], "param_groups": [{"params": [0]}]}, "no list"),
    "no state at all": ({"param_groups": [{"params": [0]}]}, "no list of param_groups"),
    "parameter ids of text": (
        {"state": {}, "param_groups": [{"params": ["a"]}]},
        "no list of parameter indices",
    ),
    "a key that is no index": ({"state": {"x": {}}, "param_groups": [{"params": [0]}]}, "x is of"),
}


@pytest.mark.parametrize("case", _DAMAGED)
def test_a_damaged_or_hostile_state_is_refused_whole_before_any_step(case):
    # A buffer smaller than its parameter was taken as is, and the fused kernel wrote past
    # its end at the next step (a segmentation fault, or worse, silently).
    param = nn.Parameter(torch.zeros(4))
    optimizer = FusedSGD([param], lr=0.5, momentum=0.9)
    saved, match = _DAMAGED[case]
    with pytest.raises(ValueError, match=match):
        optimizer.load_state_dict(saved)
    assert optimizer.param_groups[0]["lr"] == 0.5 and not optimizer.state  # nothing taken
    param.grad = torch.ones(4)
    optimizer.step()
    assert torch.equal(param, torch.full((4,), -0.5))


def test_a_state_of_torchs_sgd_is_taken():
    model = nn.Linear(3, 2)
    reference = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    model(torch.ones(1, 3)).sum().backward()
    reference.step()
    mine = FusedSGD(model.parameters(), lr=0.5, momentum=0.9)
    mine.load_state_dict(reference.state_dict())
    assert mine.param_groups[0]["lr"] == 0.1
    assert torch.equal(mine.state[model.bias]["momentum_buffer"],
                       reference.state[model.bias]["momentum_buffer"])  # fmt: skip


_RUN = """
import json, sys, tempfile
from one_process import run_quietly, single_rank_environment
from workloads.configuration.train_config import TrainConfig
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
