"""Every strategy against DDP on real 2-rank gloo steps (one spawn per scenario, shared by the
parametrized assertions): the gradients of one step (exact, and compressed within its rounding
bound), a parameter unused on some ranks or of no elements, and an exact strategy training the
model one process trains on the global batch. PowerSGD, model averaging and the collectives a
strategy calls are in test_strategies_powersgd.py, test_strategies_averaging.py and
test_strategies_collectives.py."""

from __future__ import annotations

import copy
import gc

import pytest
import torch
from torch import nn

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import (
    BranchNet,
    EmptyParamNet,
    backward_gradients,
    config_for,
    local_gradients,
    local_gradients_or_zeros,
    mean_over_ranks,
    small_bn_net,
    step,
    trainer,
)
from workloads import strategies
from workloads.strategies.local import LocalStrategy
from workloads.telemetry.timing import CpuClock, StepTimer

EXACT = ("allreduce", "allreduce-per-param", "gather-scatter")
COMPRESSED = {"fp16-compress": torch.float16, "bf16-compress": torch.bfloat16}


def _first_step_gradients(rank: int, world_size: int) -> dict[str, list[torch.Tensor]]:
    template = small_bn_net()
    out = {"local": local_gradients(rank, template)}
    for name in ("ddp", *EXACT, *COMPRESSED):
        tr = trainer(rank, world_size, config_for(name), copy.deepcopy(template), 1)
        out[name] = backward_gradients(tr)
        del tr
        gc.collect()  # no DDP reducer may outlive its use (see tests/distributed.py)
    return out


@pytest.fixture(scope="module")
def first_step() -> list[dict[str, list[torch.Tensor]]]:
    return run_ranks(_first_step_gradients, world_size=2)


def test_local_gradients_differ_between_ranks_so_averaging_is_observable(first_step):
    assert not torch.allclose(first_step[0]["local"][-1], first_step[1]["local"][-1])


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_gives_the_mean_of_the_local_gradients(first_step, rank):
    local0, local1 = first_step[0]["local"], first_step[1]["local"]
    for ddp, g0, g1 in zip(first_step[rank]["ddp"], local0, local1, strict=True):
        torch.testing.assert_close(ddp, (g0 + g1) / 2)


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("rank", [0, 1])
def test_exact_strategies_give_the_same_gradients_as_ddp(first_step, name, rank):
    for ours, ddp in zip(first_step[rank][name], first_step[rank]["ddp"], strict=True):
        torch.testing.assert_close(ours, ddp, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", COMPRESSED)
@pytest.mark.parametrize("rank", [0, 1])
def test_compressed_all_reduce_stays_within_its_rounding_bound(first_step, name, rank):
    # Each rank's g_i/2 is rounded to the compressed type (relative error <= u, the unit
    # roundoff eps/2) and the sum of the two rounded halves once more; casting back is exact.
    # So |error| <= u(|g_0| + |g_1|)/2 + u|sum| <= 3u mean|g_i|, plus the absolute spacing of
    # subnormals (fp16 flushes tiny gradients) for each of the 3 roundings, plus fp32's own
    # rounding of the DDP reference.
    info = torch.finfo(COMPRESSED[name])
    u, tiny = info.eps / 2, info.smallest_normal * info.eps
    ours_all, ddp_all = first_step[rank][name], first_step[rank]["ddp"]
    for i, (ours, ddp) in enumerate(zip(ours_all, ddp_all, strict=True)):
        mean_abs = (first_step[0]["local"][i].abs() + first_step[1]["local"][i].abs()) / 2
        bound = 3 * u * mean_abs + 3 * tiny + 1e-7
        assert ((ours - ddp).abs() <= bound).all(), f"{name}: parameter {i} outside the bound"
    # And compression really happened (a bound met by exact equality would prove nothing).
    assert any(not torch.equal(o, d) for o, d in zip(ours_all, ddp_all, strict=True))


def _steps_with_unused_parameters(rank: int, world_size: int, name: str) -> dict[str, object]:
    """The first step's gradients of a model whose `branch` only rank 0 uses and whose
    `unused` none does, then two more steps (the collectives must still match)."""
    template = BranchNet(branch_rank=0)
    config = config_for(
        name, **({"averaging_warmup_steps": 3} if name == "model-averaging" else {})
    )
    tr = trainer(rank, world_size, config, copy.deepcopy(template), 3)
    out: dict[str, object] = {"mean": mean_over_ranks(local_gradients_or_zeros(rank, template, 3))}
    out["first"] = backward_gradients(tr)
    for i in (1, 2):
        step(tr, i)
    out["weights"] = [p.detach().clone() for p in tr.strategy.inner.parameters()]
    return out


@pytest.mark.parametrize("name", [*EXACT, "model-averaging"])
def test_a_parameter_unused_on_some_ranks_is_averaged_as_zeros_there(name):
    # Skipping the missing gradient would give the ranks collectives of different sizes
    # (gloo aborts, or a hang) or, sizes alike, average one rank's layer with another's.
    ranks = run_ranks(_steps_with_unused_parameters, world_size=2, name=name)
    unused = [i for i, (n, _) in enumerate(BranchNet(0).named_parameters()) if "unused" in n]
    for r in ranks:
        for i, (ours, mean) in enumerate(zip(r["first"], r["mean"], strict=True)):
            if i in unused:  # in no rank's forward: no gradient, as in one process
                assert ours is None
            else:
                torch.testing.assert_close(ours, mean, rtol=1e-5, atol=1e-7)
    assert ranks[0]["first"][2].abs().sum() > 0  # rank 0's branch gradient reached rank 1
    for a, b in zip(ranks[0]["weights"], ranks[1]["weights"], strict=True):
        assert torch.equal(a, b)  # still one model


class UnusedLayerNet(nn.Module):
    """An MLP beside a layer in no forward (a head left over, a frozen-by-accident branch)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


GLOBAL_BATCH, GLOBAL_STEPS = 12, 4
SGD = {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}


def _global_batches() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(GLOBAL_STEPS, GLOBAL_BATCH, 1, 8, 8, generator=generator)
    return x, torch.randint(0, 10, (GLOBAL_STEPS, GLOBAL_BATCH), generator=generator)


def _sgd_steps(strategy, optimizer, xs, ys) -> list[torch.Tensor]:
    timer = StepTimer(CpuClock())
    for x, y in zip(xs, ys, strict=True):
        timer.start()
        loss = nn.functional.cross_entropy(strategy.module(x), y)
        timer.lap("forward")
        strategy.backward(loss, timer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        timer.lap("optimizer")
        strategy.after_step(timer)
        timer.finish()
    return [p.detach().clone() for p in strategy.inner.parameters()]


def _shard_of_the_global_batch(rank: int, world_size: int, name: str) -> list[torch.Tensor]:
    warm_up = {"averaging_warmup_steps": GLOBAL_STEPS} if name == "model-averaging" else {}
    policy = {"policy": ("sync",)} if name == "adaptive-sync" else {}  # it starts exact
    config = config_for(name, **SGD, **warm_up, **policy)
    model = UnusedLayerNet()
    strategy = strategies.build(config.strategy, config.run.seed, model, CpuClock())
    per_rank = slice(rank * GLOBAL_BATCH // world_size, (rank + 1) * GLOBAL_BATCH // world_size)
    xs, ys = _global_batches()
    return _sgd_steps(
        strategy, config.build_optimizer(model.parameters()), xs[:, per_rank], ys[:, per_rank]
    )


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("name", [*EXACT, "model-averaging", "adaptive-sync"])
def test_an_exact_strategy_trains_the_model_one_process_trains_on_the_global_batch(
    name, world_size
):
    # Model averaging in its warm-up is all-reduce, adaptive-sync in its exact mode. A layer
    # in no forward has no gradient in one process, so SGD leaves it alone: exchanged as
    # zeros, weight decay and momentum moved it on every worker (and `allreduce` was another
    # model than `local`).
    model = UnusedLayerNet()
    config = config_for("allreduce", **SGD)
    xs, ys = _global_batches()
    one = _sgd_steps(LocalStrategy(model), config.build_optimizer(model.parameters()), xs, ys)
    ranks = run_ranks(_shard_of_the_global_batch, world_size=world_size, name=name)
    for weights in ranks:
        for ours, theirs in zip(weights, one, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert torch.equal(ranks[0][-1], UnusedLayerNet().unused.bias)  # untouched, as in one


def _ddp_with_an_unused_parameter(rank: int, world_size: int, name: str) -> str:
    tr = trainer(rank, world_size, config_for(name), BranchNet(branch_rank=None), 2)
    try:
        step(tr, 0)
    except RuntimeError as err:
        return str(err)
    finally:
        del tr
        gc.collect()
    return "trained"


@pytest.mark.parametrize("name", ["ddp", "powersgd"])
def test_ddp_refuses_a_parameter_without_a_gradient_in_one_line_naming_it(name):
    # DDP itself would fail only at the next forward, in a page of text.
    for said in run_ranks(_ddp_with_an_unused_parameter, world_size=2, name=name):
        assert said.startswith("parameter unused.weight got no gradient on this rank"), said
        assert "\n" not in said and "strategy=allreduce" in said


def _steps_with_an_empty_parameter(rank: int, world_size: int, name: str) -> list[torch.Tensor]:
    config = (
        config_for(name, powersgd_rank=1, powersgd_start_iter=2)
        if name == "powersgd"
        else (config_for(name))
    )
    tr = trainer(rank, world_size, config, EmptyParamNet(), 3)
    for i in range(3):  # with PowerSGD: two plain steps, then a compressed one
        step(tr, i)
    weights = [p.detach().clone() for p in tr.strategy.inner.parameters()]
    del tr
    gc.collect()
    return weights


@pytest.mark.parametrize("name", ["powersgd", "ddp", "allreduce-per-param", "gather-scatter"])
def test_a_parameter_of_no_elements_trains_like_any_other(name):
    # torch's PowerSGD hook fails on one (it views each matrix as [rows, -1]).
    ranks = run_ranks(_steps_with_an_empty_parameter, world_size=2, name=name)
    for a, b in zip(ranks[0], ranks[1], strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ranks[0][0], EmptyParamNet().body[1].weight)  # it did train
