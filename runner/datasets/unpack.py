"""Preparing verified downloads: unpacking an archive into place (Unpacked), converting
epsilon (EpsilonCache): the preparers a data set's source names (runner/datasets/catalog.py).

Each step builds in a temporary directory beside its final place and renames it there, so an
interrupted one leaves nothing that looks complete (runner/datasets/fetch.py removes what a
killed one left). An archive that does not unpack, or is not the published one, is a
RunnerError saying to delete it and fetch again; the disk's own errors stay OSErrors.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runner.datasets import wmt
from runner.datasets.catalog import DataSource
from runner.datasets.download import Progress
from runner.errors import RunnerError
from workloads.data import EPSILON_NUM_FEATURES, DataError, epsilon_cache_dir


@dataclass(frozen=True)
class Unpacked:
    """A data set published as one .tar.gz or .zip whose top-level directory `subdir` holds
    the `required` files: unpacked to <root>/<subdir> (CIFAR-10, WikiText-2, a plugin's)."""

    subdir: str
    required: tuple[str, ...]

    def path(self, name: str, root: Path) -> Path:
        return root / self.subdir

    def ready(self, name: str, root: Path) -> bool:
        return all((root / self.subdir / f).is_file() for f in self.required)

    def prepare(
        self, src: DataSource, paths: list[Path], root: Path, force: bool,
        progress: Progress | None,
    ) -> Path:  # fmt: skip
        return unpack(paths[0], root, self.subdir, self.required)

    def temporaries(self, name: str, root: Path) -> list[Path]:
        return []


@dataclass(frozen=True)
class EpsilonCache:
    """epsilon's two LIBSVM files, converted to the memory-mapped cache the loader maps."""

    def path(self, name: str, root: Path) -> Path:
        return epsilon_cache_dir(root)

    def ready(self, name: str, root: Path) -> bool:
        return (epsilon_cache_dir(root) / "meta.json").is_file()

    def prepare(
        self, src: DataSource, paths: list[Path], root: Path, force: bool,
        progress: Progress | None,
    ) -> Path:  # fmt: skip
        return convert_epsilon(src, paths, root, progress)

    def temporaries(self, name: str, root: Path) -> list[Path]:
        return []


def unpack(archive: Path, root: Path, subdir: str, required: tuple[str, ...]) -> Path:
    """Unpack the .tar.gz or .zip `archive` next to its final place, check that its top-level
    directory `subdir` has the `required` files, then rename that directory into place."""
    dest = root / subdir
    tmp = Path(tempfile.mkdtemp(prefix=f".{subdir}-", dir=root))
    try:
        if archive.suffix == ".zip":
            extract_zip(archive, tmp)
        else:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(tmp, filter="data")  # refuses absolute paths, links out, devices
        missing = [f for f in required if not (tmp / subdir / f).is_file()]
        if missing:
            raise RunnerError(
                f"{archive}: has no {subdir}/{missing[0]}; not the published archive. "
                "Delete it and fetch again"
            )
        wmt.make_room(dest)
        os.replace(tmp / subdir, dest)
    except OSError as err:
        if err.errno is not None:  # the disk's (full, read-only): fetch() names it
            raise
        raise RunnerError(f"{archive}: cannot unpack ({err}); delete it and fetch again") from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as err:
        raise RunnerError(f"{archive}: cannot unpack ({err}); delete it and fetch again") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def extract_zip(archive: Path, dest: Path) -> None:
    """Extract into `dest`, refusing the whole archive if any member would land outside it
    (an absolute path, a drive, or a `..`): zipfile alone would silently rewrite such names."""
    with zipfile.ZipFile(archive) as z:
        for name in z.namelist():
            path = PurePosixPath(name.replace("\\", "/"))
            if path.is_absolute() or ".." in path.parts or ":" in next(iter(path.parts), ""):
                raise RunnerError(
                    f"{archive}: member {name!r} would unpack outside {dest}; refusing the "
                    "archive. Delete it and fetch again"
                )
        z.extractall(dest)


def convert_epsilon(
    src: DataSource, paths: list[Path], root: Path, progress: Progress | None
) -> Path:
    try:
        from workloads.data.libsvm import convert
    except ImportError as err:  # numpy comes with the workloads extra
        raise RunnerError(
            f"converting epsilon needs numpy ({err}); pip install 'stackbench[workloads]'"
        ) from None

    def on_rows(split: str, rows: int) -> None:
        if progress is not None:
            progress(f"converting {split}", rows, src.expected_rows.get(split), "samples")

    try:
        return convert(
            dict(zip(("train", "test"), paths, strict=True)),
            epsilon_cache_dir(root),
            EPSILON_NUM_FEATURES,
            src.expected_rows,
            on_rows,
        )
    except DataError as err:
        raise RunnerError(f"{err}; delete it and fetch again (runner data fetch epsilon)") from None
