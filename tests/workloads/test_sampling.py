import torch

from workloads.data.sampling import batches, epoch_shard, eval_shard, steps_per_epoch


def test_epoch_shards_are_disjoint_equal_sized_and_cover_all_but_the_remainder():
    n, world = 103, 4
    shards = [epoch_shard(n, world, r, epoch=3, seed=1) for r in range(world)]
    seen = torch.cat(shards)
    assert len({len(s) for s in shards}) == 1
    assert len(seen) == n - n % world
    assert len(set(seen.tolist())) == len(seen)


def test_epoch_shards_change_between_epochs_but_not_between_calls():
    a = epoch_shard(100, 2, 0, epoch=0, seed=0)
    assert torch.equal(a, epoch_shard(100, 2, 0, epoch=0, seed=0))
    assert not torch.equal(a, epoch_shard(100, 2, 0, epoch=1, seed=0))


def test_eval_shards_cover_every_test_sample_exactly_once():
    parts = torch.cat([eval_shard(10, 3, r) for r in range(3)])
    assert sorted(parts.tolist()) == list(range(10))


def test_batches_and_steps_per_epoch_agree():
    shard = epoch_shard(1437, 2, 0, epoch=0, seed=0)
    assert len(batches(shard, 32)) == steps_per_epoch(1437, 2, 32) == 23
