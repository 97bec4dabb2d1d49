"""The cursor sampler: sampling.py's partition when nothing changes, exact re-sharding when
the batch or the world changes mid-epoch."""

from __future__ import annotations

import pytest
import torch

from workloads.adaptive.sampler import Cursor, epoch_order
from workloads.data.sampling import batches, epoch_shard


@pytest.mark.parametrize(("num", "world", "batch"), [(100, 2, 8), (103, 3, 5), (64, 4, 16)])
def test_fixed_batch_and_world_reproduce_the_static_sampler(num, world, batch):
    order = epoch_order(num, epoch=2, seed=7)
    for rank in range(world):
        expected = batches(epoch_shard(num, world, rank, 2, 7), batch)
        cursor, got = Cursor(2), []
        while not cursor.epoch_done(num, world):
            got.append(cursor.step_indices(order, batch * world, world, rank))
            cursor = cursor.advance(num, batch * world, world)
        assert len(got) == len(expected)
        for ours, theirs in zip(got, expected, strict=True):
            assert torch.equal(ours, theirs)


def _epoch_with_changes(num: int, plan: dict[int, tuple[int, int]]) -> list[list[torch.Tensor]]:
    """Every step's per-rank indices; plan maps a step to a new (global batch, world)."""
    order = epoch_order(num, epoch=0, seed=1)
    cursor, (global_batch, world) = Cursor(0), plan[0]
    steps, step = [], 0
    while not cursor.epoch_done(num, world):
        global_batch, world = plan.get(step, (global_batch, world))
        steps.append([cursor.step_indices(order, global_batch, world, r) for r in range(world)])
        cursor = cursor.advance(num, global_batch, world)
        step += 1
    return steps


def test_batch_and_world_changes_train_every_sample_at_most_once():
    num = 1000
    plan = {0: (24, 3), 5: (48, 3), 9: (48, 2), 14: (96, 4)}
    steps = _epoch_with_changes(num, plan)
    seen = torch.cat([part for step in steps for part in step])
    assert seen.numel() == torch.unique(seen).numel()  # no sample twice
    assert seen.numel() > num - 4  # at most world - 1 samples left over
    for step in steps:  # every rank's batch the same size within a step
        assert len({part.numel() for part in step}) == 1


def test_every_rank_computes_the_same_partition_on_its_own():
    plan = {0: (16, 2), 3: (40, 4)}
    first, second = _epoch_with_changes(300, plan), _epoch_with_changes(300, plan)
    for a, b in zip(first, second, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_steps_left_counts_the_steps_to_the_end_of_the_epoch():
    num, world, global_batch = 103, 3, 12
    cursor = Cursor(0, consumed=10)
    counted = 0
    while not cursor.epoch_done(num, world):
        cursor = cursor.advance(num, global_batch, world)
        counted += 1
    assert Cursor(0, consumed=10).steps_left(num, global_batch, world) == counted


def test_a_global_batch_that_is_not_a_multiple_of_the_world_is_refused():
    with pytest.raises(ValueError, match="not a multiple"):
        Cursor(0).step_indices(epoch_order(50, 0, 0), 10, 3, 0)


def test_fraction_counts_epochs_done():
    assert Cursor(2, consumed=25).fraction(100) == 2.25
