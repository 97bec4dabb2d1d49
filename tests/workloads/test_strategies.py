"""Every strategy against DDP on real 2-rank gloo steps (one spawn per scenario, shared by
the parametrized assertions)."""

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
    two_bucket_net,
)
from workloads import strategies
from workloads.strategies.averaging import averaging_due
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


def _powersgd_over_two_buckets(rank: int, world_size: int) -> list[torch.Tensor]:
    config = config_for("powersgd", powersgd_rank=1, powersgd_start_iter=2)
    tr = trainer(rank, world_size, config, two_bucket_net(), 4)
    for i in range(4):  # two plain steps, then two compressed ones
        step(tr, i)
    weights = [p.detach().clone() for p in tr.strategy.inner.parameters()]
    del tr
    gc.collect()
    return weights


def test_powersgd_over_two_buckets_on_gloo_trains_the_same_model_on_every_rank():
    # Each bucket's second all-reduce is issued as its first completes: on gloo the ranks
    # issued them in different orders and waited on each other for ever (ResNet-20 did).
    ranks = run_ranks(_powersgd_over_two_buckets, world_size=2)
    for a, b in zip(ranks[0], ranks[1], strict=True):
        assert torch.equal(a, b)


def _powersgd_step3(rank: int, world_size: int) -> dict[str, list[torch.Tensor]]:
    template = small_bn_net()
    config = config_for("powersgd", powersgd_rank=1, powersgd_start_iter=2)
    tr = trainer(rank, world_size, config, copy.deepcopy(template), 1)
    plain = [backward_gradients(tr) for _ in range(2)][-1]  # torch's all-reduce warm-up steps
    compressed = backward_gradients(tr)
    del tr
    gc.collect()
    mean = mean_over_ranks(local_gradients(rank, template))
    return {"plain": plain, "compressed": compressed, "mean": mean}


@pytest.fixture(scope="module")
def powersgd_steps() -> list[dict[str, list[torch.Tensor]]]:
    return run_ranks(_powersgd_step3, world_size=2)


def test_powersgd_warm_up_steps_are_plain_all_reduce(powersgd_steps):
    for plain, mean in zip(powersgd_steps[0]["plain"], powersgd_steps[0]["mean"], strict=True):
        torch.testing.assert_close(plain, mean)


def test_powersgd_is_a_rank_r_orthogonal_projection_of_the_mean_gradient(powersgd_steps):
    # PowerSGD returns P P^T M for the averaged gradient matrix M and an orthonormal P with r
    # columns (error feedback is zero on the first compressed step). That is the bound: the
    # result has rank <= r, the error is orthogonal to it, so |M - P P^T M| <= |M| (and
    # <M, result> = |result|^2). Vectors (biases, BatchNorm) are sent uncompressed: exact.
    compressed, mean = powersgd_steps[0]["compressed"], powersgd_steps[0]["mean"]
    matrices = 0
    for ours, exact in zip(compressed, mean, strict=True):
        if exact.dim() == 1:
            torch.testing.assert_close(ours, exact)
            continue
        matrices += 1
        m, approx = exact.reshape(exact.shape[0], -1), ours.reshape(exact.shape[0], -1)
        assert torch.linalg.matrix_rank(approx) <= 1
        assert float(torch.dot(m.flatten(), approx.flatten())) == pytest.approx(
            float(approx.norm() ** 2), rel=1e-4
        )
        assert (m - approx).norm() < m.norm()
        assert not torch.allclose(approx, m, atol=1e-6)  # it did compress
    assert matrices == 2
    for a, b in zip(compressed, powersgd_steps[1]["compressed"], strict=True):
        torch.testing.assert_close(a, b)  # the same update on every rank


def _model_averaging(rank: int, world_size: int, period: int) -> dict[str, object]:
    """Two steps of model averaging vs. the same two steps taken locally, then averaged."""
    template = small_bn_net()
    config = config_for("model-averaging", averaging_period=period, momentum=0.0, lr=0.1)
    tr = trainer(rank, world_size, config, copy.deepcopy(template), 2)
    local = trainer(rank, world_size, config_for("allreduce", momentum=0.0, lr=0.1), template, 2)
    local.strategy.backward = _local_backward  # type: ignore[method-assign]
    out: dict[str, object] = {}
    for i in range(2):
        step(tr, i)
        step(local, i)
        out[f"after_{i + 1}"] = _state(tr.strategy.inner)
        out[f"local_{i + 1}"] = _state(local.strategy.inner)
    out["local_mean_2"] = mean_over_ranks(out["local_2"])  # type: ignore[arg-type]
    return out


def _averaging_after_a_rebuild(rank: int, world_size: int, resumed: bool) -> list[torch.Tensor]:
    """One step of a model-averaging strategy built anew at the run's step 2, its warm-up of
    2 synchronous steps done (as after an elastic change), resumed there or not."""
    config = config_for("model-averaging", averaging_warmup_steps=2, averaging_period=1000,
                        momentum=0.0, lr=0.1)  # fmt: skip
    tr = trainer(rank, world_size, config, small_bn_net(), 2)
    if resumed:
        tr.strategy.resume(2)
    step(tr, 0)
    return [p.detach().clone() for p in tr.strategy.inner.parameters()]  # BN stats are local


@pytest.mark.parametrize("resumed", [True, False])
def test_model_averaging_rebuilt_mid_run_goes_on_from_the_runs_step(resumed):
    ranks = run_ranks(_averaging_after_a_rebuild, world_size=2, resumed=resumed)
    same = all(torch.equal(a, b) for a, b in zip(ranks[0], ranks[1], strict=True))
    # Past warm-up a step is local (the ranks' batches differ, so their weights do); a
    # strategy that started its warm-up again would all-reduce it (the same weights).
    assert same is not resumed


def _local_backward(loss: torch.Tensor, timer: object) -> None:
    loss.backward()  # no communication: what each worker would do alone


def _state(model: nn.Module) -> list[torch.Tensor]:
    return [
        t.detach().clone() for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()
    ]


def test_model_averaging_steps_locally_then_equals_the_mean_of_the_local_models():
    ranks = run_ranks(_model_averaging, world_size=2, period=2)
    for r in ranks:
        for ours, local in zip(r["after_1"], r["local_1"], strict=True):
            torch.testing.assert_close(ours, local)  # step 1 of period 2: purely local
        for ours, mean in zip(r["after_2"], r["local_mean_2"], strict=True):
            torch.testing.assert_close(ours, mean)  # step 2: the average, BatchNorm included
    assert not torch.allclose(ranks[0]["after_1"][0], ranks[1]["after_1"][0])


@pytest.mark.parametrize(
    ("steps_done", "warmup", "period", "due"),
    [(1, 0, 1, True), (1, 0, 2, False), (2, 0, 2, True), (3, 2, 1, True), (2, 2, 1, False),
     (6, 2, 2, True), (5, 2, 2, False)],
)  # fmt: skip
def test_averaging_is_due_every_period_after_the_warm_up(steps_done, warmup, period, due):
    assert averaging_due(steps_done, warmup, period) is due


class _CountingCollectives:
    """A network boundary that only counts: any call means something was communicated."""

    calls = 0

    def __getattr__(self, name: str):  # every collective
        def record(*args, **kwargs):
            type(self).calls += 1
            raise AssertionError(f"{name} called in a single process")

        return record


def _single_process_step(rank: int, world_size: int) -> tuple[str, int, str]:
    from runner.job.benchmarks import CNN_DIGITS
    from workloads.strategies import build, effective_name
    from workloads.telemetry.timing import CpuClock, StepTimer

    model = torch.nn.Linear(4, 2)
    strategy = build(
        CNN_DIGITS.config.strategy,
        CNN_DIGITS.config.run.seed,
        model,
        CpuClock(),
        _CountingCollectives(),
    )
    timer = StepTimer(CpuClock())
    timer.start()
    strategy.backward(model(torch.ones(3, 4)).sum(), timer)
    strategy.after_step(timer)
    strategy.sync_buffers()
    assert model.weight.grad is not None
    return (
        type(strategy).__name__,
        _CountingCollectives.calls,
        effective_name(CNN_DIGITS.config.strategy, 1),
    )


def test_one_process_runs_the_local_strategy_and_communicates_nothing():
    (name, calls, effective) = run_ranks(_single_process_step, world_size=1)[0]
    assert name == "LocalStrategy"
    assert effective == "local"
    assert calls == 0


class _RecordingCollectives:
    """The real collectives, noting which one each exchange used."""

    def __init__(self) -> None:
        from workloads.strategies.base import Collectives

        self._real = Collectives()
        self.used: list[str] = []

    def all_reduce_mean(self, tensor: torch.Tensor) -> None:
        self.used.append("all_reduce_mean")
        self._real.all_reduce_mean(tensor)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.used.append("all_gather")
        return self._real.all_gather(tensor)


def _flat_exchanges(rank: int, world_size: int) -> dict[str, object]:
    from workloads.strategies.base import SMALL_EXCHANGE_BYTES, flat_all_reduce_mean

    out: dict[str, object] = {}
    for size, floats in (("small", 2001), ("large", SMALL_EXCHANGE_BYTES // 4 + 1)):
        generator = torch.Generator().manual_seed(rank)
        tensors = [
            torch.randn(floats - 1, generator=generator),
            torch.randn(1, generator=generator),
        ]
        expected = mean_over_ranks(tensors)
        collectives = _RecordingCollectives()
        flat_all_reduce_mean(tensors, collectives)  # type: ignore[arg-type]
        out[size] = {"got": tensors, "expected": expected, "used": collectives.used}
    return out


@pytest.mark.parametrize("size", ["small", "large"])
def test_flat_exchange_gathers_a_small_buffer_and_all_reduces_a_large_one(size):
    ranks = run_ranks(_flat_exchanges, world_size=2)
    used = {"small": ["all_gather"], "large": ["all_reduce_mean"]}[size]
    for r in ranks:
        assert r[size]["used"] == used
        for got, expected in zip(r[size]["got"], r[size]["expected"], strict=True):
            torch.testing.assert_close(got, expected)
    for a, b in zip(ranks[0][size]["got"], ranks[1][size]["got"], strict=True):
        assert torch.equal(a, b)  # every rank holds the very same mean
