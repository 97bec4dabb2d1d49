"""Which collectives a strategy calls, seen at a recording network boundary in one process: one
process running the local strategy communicates nothing, and the flat exchange gathers a small
buffer and all-reduces a large one."""

from __future__ import annotations

import pytest
import torch

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import mean_over_ranks


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
