"""Communication timing is attributed honestly (shared/DESIGN.md section 3): a network made
slower by an injected delay raises the communication phase by about that delay and leaves
forward, backward and optimizer as they were, for every strategy, including the overlapped
DDP-hook ones whose exposed communication is measured from the last bucket's stamp."""

from __future__ import annotations

import gc

import pytest

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import (
    DelayedCollectives,
    config_for,
    one_matrix_net,
    step,
    trainer,
)
from workloads.strategies.base import Collectives
from workloads.timing import PHASES

DELAY_S = 0.2
STEPS = 3  # the first is a warm-up; the phase minimum over the others resists noise
STRATEGIES = (
    "ddp", "allreduce", "allreduce-per-param", "gather-scatter", "fp16-compress",
    "bf16-compress", "powersgd", "model-averaging",
)  # fmt: skip
OPTIONS = {"powersgd": {"powersgd_start_iter": 2}}


def _phases_with_and_without_delay(rank: int, world_size: int) -> dict[str, dict]:
    out = {}
    for name in STRATEGIES:
        config = config_for(name, **OPTIONS.get(name, {}))
        out[name] = {
            "base": _min_phases(rank, world_size, config, Collectives()),
            "delayed": _min_phases(rank, world_size, config, DelayedCollectives(DELAY_S)),
        }
    return out


def _min_phases(rank, world_size, config, collectives) -> dict[str, float]:
    tr = trainer(rank, world_size, config, one_matrix_net(), STEPS, collectives)
    steps = [step(tr, i) for i in range(STEPS)][1:]
    calls_per_step = getattr(collectives, "calls", 0) / STEPS
    del tr
    gc.collect()  # no DDP reducer may outlive its use (see tests/distributed.py)
    return {p: min(s[p] for s in steps) for p in PHASES} | {"calls": calls_per_step}


@pytest.fixture(scope="module")
def timings():
    return run_ranks(_phases_with_and_without_delay, world_size=2, timeout_s=240)


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("rank", [0, 1])
def test_injected_delay_shows_up_as_communication_only(timings, name, rank):
    base, delayed = timings[rank][name]["base"], timings[rank][name]["delayed"]
    injected_s = DELAY_S * delayed["calls"]
    assert delayed["calls"] >= 1, "the delayed collectives were not used"
    grown_s = delayed["communication"] - base["communication"]
    assert grown_s >= 0.8 * injected_s, f"communication grew {grown_s:.3f} s of {injected_s} s"
    assert grown_s <= injected_s + 0.5 * DELAY_S
    for phase in ("forward", "backward", "optimizer"):
        moved_s = abs(delayed[phase] - base[phase])
        assert moved_s < 0.25 * DELAY_S, f"{phase} moved {moved_s:.3f} s"
