"""epsilon (PASCAL large-scale challenge 2008, LIBSVM's distribution): 400,000 training and
100,000 test samples of 2,000 dense features, labels +1/-1 (stored here as 1.0/0.0).

Loads from the memory-mapped cache that `runner data fetch epsilon` converts the LIBSVM
files into (workloads/data/libsvm.py). The training split is 3.2 GB, so a rank reads only its
static shard, and copies it once, in a shuffled order, into memory (its share of 3.2 GB, on
the training device): outside the clock, and it makes every training batch a contiguous
slice of that copy (workloads/data/sampling.py), where gathering 100 rows from the mapped
file each step took as long as the rest of a logistic-regression step. The test split stays
mapped whole; each rank evaluates its part of it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from workloads.data import EPSILON_NUM_FEATURES, DataError, Splits, epsilon_cache_dir
from workloads.data.libsvm import open_split
from workloads.data.sampling import shuffled_shard_order, static_shard

NUM_FEATURES = EPSILON_NUM_FEATURES
cache_dir = epsilon_cache_dir


def load_epsilon(
    root: Path, device: torch.device, rank: int = 0, world_size: int = 1, seed: int = 0
) -> Splits:
    directory = cache_dir(root)
    if not (directory / "meta.json").exists():
        raise DataError(
            f"epsilon not found in {directory}; run `runner data fetch epsilon --dir {root}`"
        )
    try:
        train_x, train_y = open_split(directory, "train")
        test_x, test_y = open_split(directory, "test")
    except DataError as err:  # meta.json is there, so only --force makes the fetch convert again
        raise DataError(f"{err}; run `runner data fetch epsilon --dir {root} --force`") from None
    if train_x.shape[1] != NUM_FEATURES:
        raise DataError(
            f"{directory}: {train_x.shape[1]} features, epsilon has {NUM_FEATURES}; "
            f"run `runner data fetch epsilon --dir {root} --force`"
        )
    start, stop = static_shard(train_x.shape[0], world_size, rank)
    order = shuffled_shard_order(stop - start, rank, seed)
    return Splits(
        train_x=torch.from_numpy(train_x[start:stop])[order].to(device),
        train_y=_labels(train_y[start:stop], device)[order.to(device)],
        test_x=torch.from_numpy(test_x).to(device),
        test_y=_labels(test_y, device),
        num_classes=2,
        train_is_rank_shard=True,
    )


def _labels(signs: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy((signs > 0).astype(np.float32)).to(device)
