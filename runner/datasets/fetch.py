"""`runner data fetch NAME`: download a data set, verify its published checksum, prepare it.

Any registered data set whose entry declares a source (runner/datasets/catalog.py) can be
fetched: its source names the files, their checksums and how they are prepared into what the
workloads read. Ours: CIFAR-10's archive unpacked to
`<dir>/cifar-10-batches-py/`, epsilon's LIBSVM files converted to the memory-mapped cache in
`<dir>/epsilon/cache/`, WikiText-2's zip unpacked to `<dir>/wikitext-2/`, the WMT en-de
corpora extracted and tokenized into `<dir>/wmt16/` and `<dir>/wmt17/` (runner/wmt.py). The
epsilon conversion parses 10^9 numbers once, on one core: about 0.7 ms per 2,000-feature line
here (number parsing is the cost), so roughly 6 minutes for the 500,000 lines plus the bzip2
decompression; training then maps the result. The WMT archives are large: wmt16 downloads
about 1.65 GB and wmt17 about 1.74 GB, 1.58 GB of it (Europarl v7, Common Crawl) the same files.

Verified downloads are kept in `<dir>/downloads/` so that preparing again never downloads
again; delete them to reclaim the space. Every step is atomic (a `.part` file or a temporary
directory renamed into place), so an interrupted fetch leaves nothing that looks complete.
Fetches into one directory take turns (an flock on the directory itself, which the kernel
releases however its holder ends), so a second fetch of a data set finds the first's result
instead of writing into the same `.part` file (WMT's archives are shared by wmt16 and wmt17);
and, holding it, a fetch removes the temporary directories a killed one left behind
(gigabytes, for epsilon and WMT).

Standard library only, plus numpy for the epsilon conversion, and no torch: the command runs
on machines and in images where training never happens. It does not train or load tensors.
(Tokenizing WMT is workloads/data/translation.py's job, imported only for those data sets.)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from runner.datasets import folder, wmt
from runner.datasets.catalog import DataSource, Preparer
from runner.datasets.download import (
    CHUNK_BYTES,
    HTTP_TIMEOUT_S,
    Progress,
    RemoteFile,
    download,
    file_digest,
)
from runner.datasets.registered import DATASETS, source
from runner.datasets.unpack import EpsilonCache, Unpacked, convert_epsilon, extract_zip, unpack
from runner.errors import RunnerError

# The command and the tests reach the catalog and the steps through this module.
__all__ = [
    "CHUNK_BYTES",
    "DATASETS",
    "HTTP_TIMEOUT_S",
    "DataSource",
    "EpsilonCache",
    "Preparer",
    "Progress",
    "RemoteFile",
    "Unpacked",
    "check_folder",
    "convert_epsilon",
    "disk_problem",
    "download",
    "extract_zip",
    "fetch",
    "file_digest",
    "is_prepared",
    "leftovers",
    "prepared_path",
    "remove_leftovers",
    "source",
    "unpack",
    "wmt",
]

log = logging.getLogger(__name__)
# What a full, read-only or forbidden disk says; any other OSError with an errno while
# unpacking is the disk's too (a damaged gzip stream raises OSError without one).
_DISK_FIX = {
    errno.ENOSPC: "the disk is full: free space there or fetch into another --dir",
    errno.EDQUOT: "the disk quota is used up: free space there or fetch into another --dir",
    errno.EROFS: "the file system is read-only: fetch into another --dir",
    errno.EACCES: "no permission to write there: fetch into another --dir",
    errno.EPERM: "no permission to write there: fetch into another --dir",
    errno.ENOTDIR: "a file stands where a directory must be: give another --dir",
}


def prepared_path(name: str, root: Path) -> Path:
    """What the workloads read for data set `name` under `root`."""
    return source(name).prepare.path(name, root)


def is_prepared(name: str, root: Path) -> bool:
    """Whether `name` is ready under `root`. A root that cannot be looked into (no
    permission, a name too long) is not: fetching there then names what is wrong in one line
    (fetch()), where pathlib's is_file() would raise its OSError as a traceback."""
    try:
        return _is_prepared(name, root)
    except OSError:
        return False


def _is_prepared(name: str, root: Path) -> bool:
    return source(name).prepare.ready(name, root)


def fetch(
    name: str,
    root: Path,
    mirror: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    named_by: str = "--dir",
) -> Path:
    """Download, verify and prepare `name` under `root`; returns what the workloads read.
    Does nothing when it is already prepared (unless `force`). RunnerError, one line, when
    it cannot: the download, the archive or the disk named; a `root` that is a file or a
    link to nothing, with the fix (`named_by`: how the user chose it, folder.problem)."""
    src = source(name)
    check_folder(name, root, named_by)
    if is_prepared(name, root) and not force:  # no lock to take: the data may be read-only
        log.info("%s is already prepared in %s", name, prepared_path(name, root))
        return prepared_path(name, root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _turn(root) as alone:
            if is_prepared(name, root) and not force:  # perhaps by the fetch just waited for
                log.info("%s is already prepared in %s", name, prepared_path(name, root))
                return prepared_path(name, root)
            if alone:  # unlocked, a temporary directory may be a running fetch's
                remove_leftovers(name, root)
            return _fetch(src, root, mirror, force, progress)
    except OSError as err:
        raise RunnerError(disk_problem(err, f"preparing {name} in {root}")) from None


def check_folder(name: str, root: Path, named_by: str = "--dir") -> None:
    """RunnerError (one line, with the fix) when `root` is a file or a link to nothing."""
    unusable = folder.problem(root, name, named_by)
    if unusable is not None:
        raise RunnerError(unusable)


def disk_problem(err: OSError, doing: str) -> str:
    """One line for a local file error: what failed, where, and the fix when it is known."""
    where = f" ({err.filename})" if err.filename else ""
    fix = _DISK_FIX.get(err.errno or 0, "check the directory and retry")
    return f"{doing} failed: {err.strerror or err}{where}; {fix}"


@contextlib.contextmanager
def _turn(root: Path) -> Iterator[bool]:
    """Hold an exclusive flock on the directory `root` for the block, waiting (and saying so)
    while another fetch has it; yields whether it holds it. A lock on the directory leaves no
    lock file behind, and the kernel releases it when its holder exits, SIGKILL included: a
    killed fetch never blocks the next."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("waiting for another `runner data fetch` into %s to finish", root)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as err:  # a file system without locks (some NFS mounts): go on alone
            log.info("cannot lock %s (%s); not guarding against a concurrent fetch", root, err)
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def leftovers(name: str, root: Path) -> list[Path]:
    """The temporary directories a fetch of `name` builds in before renaming them into place
    (mkdtemp's `.<final name>-XXXXXXXX`): found while this fetch holds the directory's turn,
    they are a killed fetch's."""
    preparer = source(name).prepare
    final = preparer.path(name, root)
    found = [*final.parent.glob(f".{final.name}-*"), *preparer.temporaries(name, root)]
    return [path for path in found if path.is_dir() and not path.is_symlink()]


def remove_leftovers(name: str, root: Path) -> None:
    for path in leftovers(name, root):
        log.info("removing %s, left by an interrupted fetch", path)
        shutil.rmtree(path, ignore_errors=True)


def _fetch(
    src: DataSource, root: Path, mirror: str | None, force: bool, progress: Progress | None
) -> Path:
    downloads = root / "downloads"
    paths = [download(f, downloads, mirror, force, progress) for f in src.files]
    return src.prepare.prepare(src, paths, root, force, progress)
