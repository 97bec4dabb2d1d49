"""Communication timing is attributed honestly (docs/design.md, "Timing"): a network made
slower by an injected delay raises the communication phase by about that delay and leaves
forward, backward and optimizer as they were, for every strategy, including the overlapped
DDP-hook ones whose exposed communication is measured from the last bucket's stamp; and a
rank's wait for a slower peer is communication too, wherever the strategy's collective is."""

from __future__ import annotations

import dataclasses
import gc
import time

import pytest

from tests.distributed import run_ranks
from tests.workloads.strategy_harness import (
    DelayedCollectives,
    HostWorkCollectives,
    config_for,
    one_matrix_net,
    step,
    trainer,
    two_bucket_net,
)
from workloads.strategies.base import Collectives
from workloads.telemetry.timing import PHASES, StepTimer

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


def _min_phases(rank, world_size, config, collectives, net=one_matrix_net) -> dict[str, float]:
    tr = trainer(rank, world_size, config, net(), STEPS, collectives)
    step(tr, 0)  # warm-up: DDP rebuilds its buckets after it
    warmup_calls = getattr(collectives, "calls", 0)
    steps = [step(tr, i) for i in range(1, STEPS)]
    calls_per_step = (getattr(collectives, "calls", 0) - warmup_calls) / (STEPS - 1)
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


HOOK_WORK_S = 0.15
HOOK_STRATEGIES = ("ddp", "fp16-compress")  # their hooks issue collectives via Collectives


def _phases_with_and_without_hook_work(rank: int, world_size: int) -> dict[str, dict]:
    out = {}
    for name in HOOK_STRATEGIES:
        config = config_for(name)
        out[name] = {
            "base": _min_phases(rank, world_size, config, Collectives(), two_bucket_net),
            "work": _min_phases(
                rank, world_size, config, HostWorkCollectives(HOOK_WORK_S), two_bucket_net
            ),
        }
    return out


@pytest.fixture(scope="module")
def hook_timings():
    return run_ranks(_phases_with_and_without_hook_work, world_size=2, timeout_s=240)


@pytest.mark.parametrize("name", HOOK_STRATEGIES)
@pytest.mark.parametrize("rank", [0, 1])
def test_host_work_inside_communication_hooks_is_booked_as_communication(hook_timings, name, rank):
    """Every bucket's hook work counts, the earlier buckets' too, although it ran while
    backward was still producing gradients."""
    base, work = hook_timings[rank][name]["base"], hook_timings[rank][name]["work"]
    assert work["calls"] == 2, "the net should fill two DDP buckets"
    added_s = HOOK_WORK_S * work["calls"]
    grown_s = work["communication"] - base["communication"]
    assert grown_s >= 0.8 * added_s, f"communication grew {grown_s:.3f} s of {added_s} s"
    assert grown_s <= added_s + 0.5 * HOOK_WORK_S
    for phase in ("forward", "backward", "optimizer"):
        moved_s = abs(work[phase] - base[phase])
        assert moved_s < 0.25 * HOOK_WORK_S, f"{phase} moved {moved_s:.3f} s"


class ScriptedClock:
    """Stamps are the given seconds, in order (CpuClock arithmetic, no waiting)."""

    def __init__(self, *stamps: float) -> None:
        self._stamps = iter(stamps)

    def stamp(self) -> float:
        return next(self._stamps)

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start

    def sync(self) -> None:
        return None


def test_a_moved_interval_leaves_the_lap_it_ran_in_and_the_phases_still_add_up():
    timer = StepTimer(ScriptedClock(0.0, 1.0, 4.0, 5.0))
    timer.start()  # 0
    timer.lap("forward")  # 1
    timer.lap("backward")  # 4: backward took 3 s, of which 0.5 s were a hook's work
    timer.move("communication", 2.0, 2.5)
    timer.lap("communication")  # 5
    phases = timer.finish()
    assert phases["forward"] == 1.0
    assert phases["backward"] == 2.5
    assert phases["communication"] == 1.5
    assert sum(phases.values()) == 5.0


SLOW_LOADING_S = 0.3


def _slow_loading(x, generator):
    time.sleep(SLOW_LOADING_S)  # a slow data loader: this rank reaches forward late
    return x


def _phases_beside_a_slow_peer(rank: int, world_size: int) -> dict[str, dict[str, float]]:
    out = {}
    for name in STRATEGIES:
        tr = trainer(
            rank, world_size, config_for(name, **OPTIONS.get(name, {})), one_matrix_net(), 3
        )
        if rank == 1:
            tr = dataclasses.replace(
                tr, splits=dataclasses.replace(tr.splits, augment=_slow_loading)
            )
        steps = [step(tr, i) for i in range(3)]
        del tr
        gc.collect()  # no DDP reducer may outlive its use (see tests/distributed.py)
        # The first two steps are warm-up: DDP agrees on rebuilt buckets in the second forward.
        out[name] = steps[2]
    return out


@pytest.fixture(scope="module")
def slow_peer_timings():
    return run_ranks(_phases_beside_a_slow_peer, world_size=2, timeout_s=240)


@pytest.mark.parametrize("name", STRATEGIES)
def test_waiting_for_a_slow_peer_is_communication(slow_peer_timings, name):
    """Rank 0 computes as fast as ever; its wait for rank 1 is in a collective, whichever
    strategy issues it: DDP's broadcast of BatchNorm buffers before forward included."""
    phases = slow_peer_timings[0][name]
    assert phases["communication"] >= 0.8 * SLOW_LOADING_S, phases
    for phase in ("data", "forward", "backward", "optimizer"):
        assert phases[phase] < 0.25 * SLOW_LOADING_S, f"{phase} holds the wait: {phases}"
    assert slow_peer_timings[1][name]["data"] >= SLOW_LOADING_S  # the slow rank's own
