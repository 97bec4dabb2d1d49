"""Data configs: which data set a run trains on, where it lives, how it is batched, and how
it is loaded and checked: each data set is an entry of the extension point DATASETS
(workloads/plugins/points.py; the key `dataset`), ours as a plugin's.

Each option has only the keys its loading and batching read: the per-worker batch
everywhere; `data_dir` where the data are files; BPTT for WikiText-2; the batch unit, the
global batch and the length limit for WMT. And each says, by its methods, how the data set
is loaded for the classification loop (`load`, from its own slice: this config and a
LoadContext) and what keeps the files under a data root from being the canonical data set
(`canonical_problem`, the closed division's check) or from being there at all
(`missing_problem`), and where its files are published (`fetch_source`: URLs, checksums
and how they are prepared, which `runner data fetch NAME` reads). Torch-free, as the
package it sits in: the loaders (workloads/data/*.py), the checks (canonical.py) and the
sources (sources.py) are imported when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from workloads.configuration.components import Choice, Component
from workloads.configuration.fields import ConfigError, setting
from workloads.data import DataError, canonical, data_root, epsilon_cache_dir
from workloads.plugins import points

if TYPE_CHECKING:
    import torch

    from runner.datasets.catalog import DataSource
    from workloads.data import Splits

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

    def load(self, ctx: LoadContext) -> Splits:
        """The train/test splits the classification loop trains on, prepared once (outside
        the clock) and placed on ctx.device. The sequence tasks read theirs themselves."""
        raise DataError(f"{self.name} is not loaded as train/test splits of samples")

    @classmethod
    def canonical_problem(cls, name: str, root: Path) -> str | None:
        """What keeps data set `name` under `root` from being the canonical one, or None;
        quick and standard-library only (the runner asks before it starts anything). A
        data set that declares no canonical form has nothing to check."""
        return None

    @classmethod
    def missing_problem(cls, name: str, root: Path) -> str | None:
        """What of data set `name` is not under `root` at all, or None (an open-division
        run's check: any data its loader accepts, but not none)."""
        return None

    @classmethod
    def fetch_source(cls, name: str) -> DataSource | None:
        """Where data set `name` is published, its checksums and how its files are prepared
        (runner/datasets/catalog.py), or None: not fetched (`runner data fetch` refuses it).
        Imports the runner's download code, so only when asked."""
        return None


@dataclass(frozen=True)
class LoadContext:
    """What a data set's loader takes besides its own config."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    seed: int = 0  # the run's (a static shard's shuffle)
    memory_format: str = "contiguous"  # of image batches (ExecutionConfig.memory_format)


@dataclass(frozen=True, kw_only=True)
class DigitsData(DataConfig):
    """scikit-learn's digits: they ship with scikit-learn, so there is no directory."""

    name: Literal["digits"] = "digits"

    def load(self, ctx: LoadContext) -> Splits:
        from workloads.data.digits import load_digits

        return load_digits(ctx.device)


@dataclass(frozen=True, kw_only=True)
class FileData(DataConfig):
    # None: $STACKBENCH_DATA or the XDG cache (workloads.data.data_root). Where the data
    # are read from, not what they are: free in the closed division.
    data_dir: str | None = None  # type: ignore[misc]  # a field where the base has a ClassVar


@dataclass(frozen=True, kw_only=True)
class Cifar10Data(FileData):
    name: Literal["cifar10"] = "cifar10"

    def load(self, ctx: LoadContext) -> Splits:
        from workloads.data.cifar10 import load_cifar10

        return load_cifar10(data_root(self.data_dir), ctx.device, ctx.memory_format)

    @classmethod
    def canonical_problem(cls, name: str, root: Path) -> str | None:
        return canonical.cifar10(root)

    @classmethod
    def missing_problem(cls, name: str, root: Path) -> str | None:
        return canonical.first_absent(root, name, canonical.cifar10_paths(root))

    @classmethod
    def fetch_source(cls, name: str) -> DataSource | None:
        from workloads.data import sources

        return sources.CIFAR10


@dataclass(frozen=True, kw_only=True)
class EpsilonData(FileData):
    name: Literal["epsilon"] = "epsilon"
    samples_shared: ClassVar[bool] = False  # each rank reads its own static shard

    def load(self, ctx: LoadContext) -> Splits:
        from workloads.data.epsilon import load_epsilon

        root = data_root(self.data_dir)
        return load_epsilon(root, ctx.device, ctx.rank, ctx.world_size, ctx.seed)

    @classmethod
    def canonical_problem(cls, name: str, root: Path) -> str | None:
        return canonical.epsilon(root)

    @classmethod
    def missing_problem(cls, name: str, root: Path) -> str | None:
        return canonical.first_absent(root, name, [epsilon_cache_dir(root) / "meta.json"])

    @classmethod
    def fetch_source(cls, name: str) -> DataSource | None:
        from workloads.data import sources

        return sources.EPSILON


@dataclass(frozen=True, kw_only=True)
class WikiText2Data(FileData):
    name: Literal["wikitext2"] = "wikitext2"
    bptt: int = setting(70, ge=2, le=100_000)  # the mean truncated-backprop window, tokens

    @classmethod
    def canonical_problem(cls, name: str, root: Path) -> str | None:
        return canonical.wikitext2(root)

    @classmethod
    def missing_problem(cls, name: str, root: Path) -> str | None:
        return canonical.first_absent(root, name, canonical.wikitext2_paths(root))

    @classmethod
    def fetch_source(cls, name: str) -> DataSource | None:
        from workloads.data import sources

        return sources.WIKITEXT2


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

    @classmethod
    def canonical_problem(cls, name: str, root: Path) -> str | None:
        return canonical.wmt(root, name)

    @classmethod
    def missing_problem(cls, name: str, root: Path) -> str | None:
        return canonical.wmt(root, name)  # no canonical sizes there: the same check

    @classmethod
    def fetch_source(cls, name: str) -> DataSource | None:
        from workloads.data import sources

        return sources.WMT[name]


for _option in (DigitsData, Cifar10Data, EpsilonData, WikiText2Data, WmtData):
    points.DATASETS.register(_option)
DATASETS = Choice("dataset", points.DATASETS, DataConfig)
