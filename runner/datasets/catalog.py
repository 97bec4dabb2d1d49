"""The data sets `runner data fetch` knows: each one's published files, checksums and how its
verified downloads become what the workloads read.

A data set declares its own source: its entry in the extension point DATASETS (a DataConfig
subclass, workloads/data/config.py) answers `fetch_source(name)` with a DataSource, ours
(workloads/data/sources.py) as a plugin's. So `runner data fetch NAME` works for any data set
registered, and nothing here branches on a data set's name. The preparers a source names:
Unpacked (an archive's top directory, runner/datasets/unpack.py), EpsilonCache (the LIBSVM
conversion, same module), WmtCorpus (runner/datasets/wmt.py), or a plugin's own.
The registered sources, by name: runner/datasets/registered.py (apart, so that the preparers
and our sources import these types without importing the registry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.datasets.download import Progress, RemoteFile

__all__ = ["DataSource", "Preparer", "RemoteFile"]


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
