"""Data configs: which data set a run trains on, where it lives, and how it is batched.

One option per data set (DATASETS, selected by the key `dataset`), each with only the keys
its loading and batching read: the per-worker batch everywhere; `data_dir` where the data
are files; BPTT for WikiText-2; the batch unit, the global batch and the length limit for
WMT. Torch-free, as the package it sits in. Not here: loading (workloads/data/*.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workloads.components import Choice, Component
from workloads.fields import ConfigError, setting
from workloads.plugins import points

MAX_BATCH = 2**24  # a per-worker batch (or its tokens) beyond this is a typo


@dataclass(frozen=True, kw_only=True)
class DataConfig(Component):
    name: str  # each data set narrows it to its Literal: the key `dataset`
    batch_size: int = setting(ge=1, le=MAX_BATCH)  # per worker, in batch_unit
    # What batch_size counts, and the units of an update over all workers (None: one batch
    # per worker). Fixed here; WMT's option makes both keys (a field overrides the ClassVar).
    batch_unit: ClassVar[str] = "samples"
    global_batch: ClassVar[int | None] = None
    # Where the files are: data sets read from files make it a key (FileData); the others
    # (digits ship with scikit-learn) have none.
    data_dir: ClassVar[str | None] = None
    # Whether every worker holds every training sample, so an epoch can be re-sharded over
    # the workers mid-way (adaptive batch size, elastic workers); not so for static shards.
    samples_shared: ClassVar[bool] = True

    def global_batch_size(self, world_size: int) -> int:
        """Units per optimizer update over all workers."""
        return self.global_batch or self.batch_size * world_size


@dataclass(frozen=True, kw_only=True)
class DigitsData(DataConfig):
    """scikit-learn's digits: they ship with scikit-learn, so there is no directory."""

    name: Literal["digits"] = "digits"


@dataclass(frozen=True, kw_only=True)
class FileData(DataConfig):
    # None: $STACKBENCH_DATA or the XDG cache (workloads.data.data_root). Where the data
    # are read from, not what they are: free in the closed division.
    data_dir: str | None = None  # type: ignore[misc]  # a field where the base has a ClassVar


@dataclass(frozen=True, kw_only=True)
class Cifar10Data(FileData):
    name: Literal["cifar10"] = "cifar10"


@dataclass(frozen=True, kw_only=True)
class EpsilonData(FileData):
    name: Literal["epsilon"] = "epsilon"
    samples_shared: ClassVar[bool] = False  # each rank reads its own static shard


@dataclass(frozen=True, kw_only=True)
class WikiText2Data(FileData):
    name: Literal["wikitext2"] = "wikitext2"
    bptt: int = setting(70, ge=2, le=100_000)  # the mean truncated-backprop window, tokens


@dataclass(frozen=True, kw_only=True)
class WmtData(FileData):
    """WMT en-de, batched by length (workloads/data/token_batching.py)."""

    name: Literal["wmt16", "wmt17"]
    # "tokens": batch_size and global_batch count padded tokens; "samples": sentences.
    batch_unit: Literal["samples", "tokens"] = "samples"  # type: ignore[misc]
    # Units an update holds over all workers, reached by accumulating micro-batches of
    # batch_size; None: one micro-batch per worker per update.
    global_batch: int | None = setting(None, ge=1, le=2**30)  # type: ignore[misc]
    max_seq_len: int | None = setting(None, ge=1, le=65536)  # longer training pairs: skipped

    def validate(self) -> None:
        if self.global_batch is not None and self.global_batch < self.batch_size:
            raise ConfigError(
                "global_batch", f"must be at least batch_size={self.batch_size} (or none)"
            )


for _option in (DigitsData, Cifar10Data, EpsilonData, WikiText2Data, WmtData):
    points.DATASETS.register(_option)
DATASETS = Choice("dataset", points.DATASETS, DataConfig)
