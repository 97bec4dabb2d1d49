"""Which samples each rank trains on: disjoint shards of one shuffled order per epoch.

Every rank computes the same permutation from (seed, epoch) and keeps its own stride, so
workers see disjoint samples each epoch with no communication, and every rank gets the same
number of samples (the remainder of an uneven split is dropped for that epoch), so no rank
waits in a collective for a peer that has run out of data.

Data sets too large for every rank to hold (epsilon) are split once instead: each rank owns a
static contiguous shard, the same size on every rank, shuffled once when it is loaded
(outside the clock); an epoch takes its contiguous batches in a fresh random order, so a batch
is a view of the shard and not a gather of rows (for a linear model, the gather cost as much
as the rest of the step). The batches themselves are the same every epoch; their order is not.
"""

from __future__ import annotations

import torch


def epoch_shard(
    num_samples: int, world_size: int, rank: int, epoch: int, seed: int
) -> torch.Tensor:
    """Indices of the samples `rank` trains on in `epoch`."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(num_samples, generator=generator)
    usable = num_samples - num_samples % world_size
    return order[rank:usable:world_size]


def eval_shard(num_samples: int, world_size: int, rank: int) -> torch.Tensor:
    """Indices `rank` evaluates: a fixed, disjoint split covering every test sample once."""
    return torch.arange(rank, num_samples, world_size)


def batches(indices: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """Consecutive batches; the last one may be smaller (the same size on every rank)."""
    return list(torch.split(indices, batch_size))


def steps_per_epoch(num_samples: int, world_size: int, batch_size: int) -> int:
    per_rank = num_samples // world_size
    return -(-per_rank // batch_size)


def static_shard(num_samples: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, stop) of the contiguous block `rank` owns for the whole run; every rank's block
    has num_samples // world_size samples (the remainder is never trained on), so a rank can
    read exactly its part of a data set too large to hold whole."""
    size = num_samples // world_size
    if size == 0:
        raise ValueError(f"{num_samples} samples cannot be shared by {world_size} ranks")
    return rank * size, (rank + 1) * size


def shuffled_shard_order(num_local: int, rank: int, seed: int) -> torch.Tensor:
    """The order a rank's static shard is shuffled into once, when it is loaded."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + 1_009 * (rank + 1))
    return torch.randperm(num_local, generator=generator)


def slice_batches(num_local: int, batch_size: int, rank: int, epoch: int, seed: int) -> list[slice]:
    """An epoch of a pre-shuffled shard: its contiguous batches in a fresh random order, the
    short remainder (if any) last, so every rank's batches are the same sizes step by step.
    A batch is then a view of the shard, not a gather of rows."""
    starts = list(range(0, num_local, batch_size))
    short = [starts.pop()] if num_local % batch_size else []
    generator = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 1_009 + rank)
    order = [starts[i] for i in torch.randperm(len(starts), generator=generator).tolist()]
    return [slice(start, min(start + batch_size, num_local)) for start in order + short]
