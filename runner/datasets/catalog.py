"""The data sets `runner data fetch` knows: each one's published files, checksums and how its
verified downloads become what the workloads read.

A data set declares its own source: its entry in the extension point DATASETS (a DataConfig
subclass, workloads/data/config.py) answers `fetch_source(name)` with a DataSource, ours
(workloads/data/sources.py) as a plugin's. So `runner data fetch NAME` works for any data set
registered, and nothing here branches on a data set's name. The preparers a source names:
Unpacked (an archive's top directory, runner/datasets/unpack.py), EpsilonCache (the LIBSVM
conversion, same module), WmtCorpus (runner/datasets/wmt.py), or a plugin's own.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.datasets.download import Progress, RemoteFile
from runner.errors import RunnerError

__all__ = ["DATASETS", "DataSource", "Preparer", "RemoteFile", "source"]


class Preparer(Protocol):
    """How a data set's verified downloads become what its loader reads, under a data root."""

    def path(self, name: str, root: Path) -> Path:
        """What the workloads read (its temporary twin, `.<final name>-XXXX`, is built beside
        it and renamed into place)."""
        ...

    def ready(self, name: str, root: Path) -> bool:
        """Whether it is complete under `root` (quick; no checksums)."""
        ...

    def prepare(
        self, src: DataSource, paths: list[Path], root: Path, force: bool,
        progress: Progress | None,
    ) -> Path:  # fmt: skip
        """Make path(name, root) from the verified downloads `paths` (src.files' order)."""
        ...

    def temporaries(self, name: str, root: Path) -> list[Path]:
        """Temporary directories it builds besides the one beside path() (none, mostly)."""
        ...


@dataclass(frozen=True)
class DataSource:
    name: str
    files: tuple[RemoteFile, ...]
    checksum_origin: str  # where the published checksums come from, for the record
    prepare: Preparer
    expected_rows: dict[str, int] = field(default_factory=dict)  # LIBSVM splits only


class _Catalog(MutableMapping[str, DataSource]):
    """Data set name -> its source, read from the DATASETS extension point each time (a
    plugin loaded after start-up is seen). Setting a name declares its source here instead:
    the tests point a built-in data set at files they serve."""

    def __init__(self) -> None:
        self._declared: dict[str, DataSource] = {}

    def _registered(self) -> dict[str, DataSource]:
        from workloads.plugins import points

        found: dict[str, DataSource] = {}
        for name, entry in points.DATASETS.entries().items():
            declare = getattr(entry.obj, "fetch_source", None)
            src = declare(name) if callable(declare) else None
            if isinstance(src, DataSource):
                found[name] = src
        return found

    def __getitem__(self, name: str) -> DataSource:
        if name in self._declared:
            return self._declared[name]
        return self._registered()[name]

    def __setitem__(self, name: str, src: DataSource) -> None:
        self._declared[name] = src

    def __delitem__(self, name: str) -> None:
        del self._declared[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._registered(), **self._declared})

    def __len__(self) -> int:
        return len({**self._registered(), **self._declared})


DATASETS: MutableMapping[str, DataSource] = _Catalog()


def source(name: str) -> DataSource:
    try:
        return DATASETS[name]
    except KeyError:
        raise RunnerError(
            f"unknown data set {name!r}; choose one of: {', '.join(DATASETS)}"
        ) from None
