"""Datasets as tensors prepared once, and how each rank draws its batches from them.

A data set's config loads it (DataConfig.load, workloads/data/config.py): the train/test
split of the dataset, preprocessed once (outside the benchmark clock, as MLPerf does) and
placed on the training device, so a step's data phase is an index plus batched on-device
augmentation, and not per-sample Python. Datasets too large to hold per rank (epsilon) load
only the rank's static shard of the training split, shuffled once
(`Splits.train_is_rank_shard`): its batches are contiguous slices.

Where data sets live is decided here and only here (`data_root`). This module imports no
torch at import time: the runner's `runner data fetch` uses the same paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]

DATA_DIR_ENV = "STACKBENCH_DATA"
# Where each data set lives under the data root; `runner data fetch NAME` puts it there.
CIFAR10_SUBDIR = "cifar-10-batches-py"  # the published archive's own top-level directory
CIFAR10_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
EPSILON_SUBDIR = "epsilon"
EPSILON_NUM_FEATURES = 2000
# The `format` of the converted caches' meta.json, written by their builders (libsvm.py,
# translation.py) and checked by their readers and by canonical.py's quick check.
EPSILON_CACHE_FORMAT = "stackbench-libsvm-dense-v1"
TRANSLATION_CACHE_FORMAT = "stackbench-parallel-v1"
WIKITEXT2_SUBDIR = "wikitext-2"  # the published archive's own top-level directory
WIKITEXT2_FILES = ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")
# The WMT en-de data sets: raw text in <subdir>/raw, the tokenized cache in <subdir>/cache.
WMT_SUBDIRS = {"wmt16": "wmt16", "wmt17": "wmt17"}


def epsilon_cache_dir(root: Path) -> Path:
    """Where epsilon's converted, memory-mappable cache lives (workloads/data/libsvm.py)."""
    return root / EPSILON_SUBDIR / "cache"


def translation_cache_dir(root: Path, name: str) -> Path:
    """Where WMT data set `name`'s tokenized cache lives (workloads/data/translation.py)."""
    if name not in WMT_SUBDIRS:
        raise ValueError(
            f"no translation data set {name!r}; choose one of: {', '.join(WMT_SUBDIRS)}"
        )
    return root / WMT_SUBDIRS[name] / "cache"


def default_data_dir() -> Path:
    """$STACKBENCH_DATA, else the XDG cache: $XDG_CACHE_HOME (or ~/.cache)/stackbench/data.

    Data sets are a cache (they can always be fetched again), hence the cache directory and
    not the results directory; on clusters, point $STACKBENCH_DATA (or config data_dir) at a
    mounted volume.
    """
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache) / "stackbench" / "data"


def data_root(configured: str | None) -> Path:
    """The data directory of a run: config `data_dir` when set, else default_data_dir()."""
    return Path(configured).expanduser() if configured else default_data_dir()


class DataError(RuntimeError):
    """A data file is missing, corrupt or truncated; the message names it and the fix."""


@dataclass(frozen=True)
class Splits:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    augment: Augment | None = None  # batched, on-device training augmentation
    # True when train_x/train_y hold only this rank's static shard (every rank's the same
    # size), shuffled when loaded; the loop then takes contiguous batches of it in a fresh
    # order each epoch instead of sharding one global order (workloads/data/sampling.py).
    train_is_rank_shard: bool = False

    @property
    def num_train(self) -> int:
        return int(self.train_y.shape[0])

    @property
    def num_test(self) -> int:
        return int(self.test_y.shape[0])

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])
