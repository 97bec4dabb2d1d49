"""The epoch's samples as a cursor, so that the batch size and the number of workers can change
in the middle of an epoch.

workloads/data/sampling.py gives rank r the stride order[r::W] of one shuffled order of the
epoch and cuts it into batches of b; global step i then covers positions [i*b*W, (i+1)*b*W)
of the order, rank r taking every W-th of them. Here the same layout is computed from a
cursor, the number of positions already trained on: the next step takes the next B positions
(B the global batch) and rank r takes block[r::W]. With B and W fixed this is exactly
sampling.py's partition (tested); when either changes, only the remainder of the epoch is
re-sharded, so every sample is trained on at most once per epoch and every rank computes the
same partition from (seed, epoch, cursor, B, W) with no communication. As in sampling.py, the
epoch's last step is shortened to a multiple of W positions, so at most W-1 samples of an
epoch go unused and every rank's batch has the same size. KungFu's dataset adaptor
(srcs/python/kungfu/tensorflow/v1/datasets/adaptor.py) resizes the same way: skip the
offset already trained on, then batch and shard the rest.

The cursor (epoch, consumed) is all a joining worker needs to continue the epoch
(elastic/transfer.py sends it). Not here: data sets held as static per-rank shards (epsilon),
which cannot be re-sharded without moving data, and token batching.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workloads.data.sampling import epoch_shard


def epoch_order(num_samples: int, epoch: int, seed: int) -> torch.Tensor:
    """The epoch's shuffled order of sample indices (epoch 0-based), sampling.py's order."""
    return epoch_shard(num_samples, 1, 0, epoch, seed)


def step_positions(num_samples: int, consumed: int, global_batch: int, world_size: int) -> int:
    """How many positions the next step takes: B, or the multiple of W that is left."""
    if global_batch < 1 or world_size < 1:
        raise ValueError(f"need B >= 1 and W >= 1, got B={global_batch}, W={world_size}")
    if global_batch % world_size:
        raise ValueError(f"global batch {global_batch} is not a multiple of {world_size} workers")
    left = num_samples - consumed
    return min(global_batch, left - left % world_size)


@dataclass(frozen=True)
class Cursor:
    """Where an epoch stands: `consumed` positions of epoch `epoch`'s order are trained on."""

    epoch: int  # 0-based
    consumed: int = 0

    def step_indices(
        self, order: torch.Tensor, global_batch: int, world_size: int, rank: int
    ) -> torch.Tensor:
        """Rank `rank`'s samples of the next step (empty when the epoch is done)."""
        take = step_positions(order.numel(), self.consumed, global_batch, world_size)
        block = order[self.consumed : self.consumed + max(0, take)]
        return block[rank::world_size]

    def advance(self, num_samples: int, global_batch: int, world_size: int) -> Cursor:
        take = step_positions(num_samples, self.consumed, global_batch, world_size)
        return Cursor(self.epoch, self.consumed + max(0, take))

    def epoch_done(self, num_samples: int, world_size: int) -> bool:
        """Whether fewer samples than workers are left (the rest is dropped, as sampling.py)."""
        return num_samples - self.consumed < world_size

    def steps_left(self, num_samples: int, global_batch: int, world_size: int) -> int:
        """Steps to the end of the epoch at this batch and world size."""
        left = num_samples - self.consumed
        usable = left - left % world_size
        return -(-usable // global_batch) if usable > 0 else 0

    def fraction(self, num_samples: int) -> float:
        """Epochs done as a fraction: epoch + consumed / N (for epoch-based LR schedules)."""
        return self.epoch + self.consumed / num_samples
