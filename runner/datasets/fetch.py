"""`runner data fetch NAME`: download a data set, verify its published checksum, prepare it.

Preparing means what the workloads read: CIFAR-10's archive unpacked to
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
import hashlib
import http.client
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

from runner.datasets import wmt
from runner.errors import RunnerError
from workloads.data import (
    CIFAR10_FILES,
    CIFAR10_SUBDIR,
    EPSILON_NUM_FEATURES,
    WIKITEXT2_FILES,
    WIKITEXT2_SUBDIR,
    WMT_SUBDIRS,
    DataError,
    epsilon_cache_dir,
    translation_cache_dir,
)

log = logging.getLogger(__name__)
CHUNK_BYTES = 1 << 20
HTTP_TIMEOUT_S = 60.0
# (what, done, total or None, unit): unit "bytes" for downloads, "samples" for conversions.
Progress = Callable[[str, int, int | None, str], None]
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


@dataclass(frozen=True)
class RemoteFile:
    url: str
    algorithm: Literal["md5", "sha256"]
    digest: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class DataSource:
    name: str
    files: tuple[RemoteFile, ...]
    checksum_origin: str  # where the published checksums come from, for the record
    expected_rows: dict[str, int] = field(default_factory=dict)  # LIBSVM splits only


# The WMT en-de archives (runner/wmt.py says which members of each it reads); sizes as
# tensorflow/datasets records them.
_EUROPARL_V7 = RemoteFile(  # 657,632,379 bytes
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "sha256",
    "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
)
_COMMONCRAWL = RemoteFile(  # 918,311,367 bytes
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "sha256",
    "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
)
_NEWS_COMMENTARY_V11 = RemoteFile(  # 75,178,032 bytes
    "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
    "sha256",
    "cfe8ab047e05043476e498ee765c98e939c7b7d6d294e856344c84476b619d6a",
)
_NEWS_COMMENTARY_V12 = RemoteFile(  # 168,591,139 bytes
    "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
    "sha256",
    "2b45f30ef1d550d302fd17dd3a5cbe19134ccc4c2cf50c2dae534aee600101a2",
)
_NEWSTEST2014 = RemoteFile(
    "http://statmt.org/wmt14/test-full.tgz", "md5", "a8cd784e006feb32ac6f3d9ec7eb389a"
)

DATASETS: dict[str, DataSource] = {
    "cifar10": DataSource(
        name="cifar10",
        files=(
            RemoteFile(
                "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                "md5",
                "c58f30108f718f92721af3b95e74349a",
            ),
        ),
        checksum_origin="the MD5 published on https://www.cs.toronto.edu/~kriz/cifar.html",
    ),
    "epsilon": DataSource(
        name="epsilon",
        files=(
            RemoteFile(
                "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/epsilon_normalized.bz2",
                "sha256",
                "aff916d4f97f18d286558ca088d2a9f7e1fcee9376539a5aa6ef5b7ef9dfa978",
            ),
            RemoteFile(
                "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/epsilon_normalized.t.bz2",
                "sha256",
                "cb299295ad11e200696eaa3050f5d8cf700eaa9c65e6aa859bda959f8669458b",
            ),
        ),
        # LIBSVM's page publishes no checksums; these are the SHA-256 digests that
        # scikit-learn_bench (Intel) and IBM's benchmark suite pin for the same URLs.
        checksum_origin="SHA-256 pinned by scikit-learn_bench and IBM's dataset loaders",
        expected_rows={"train": 400_000, "test": 100_000},
    ),
    "wikitext2": DataSource(
        name="wikitext2",
        files=(
            RemoteFile(
                "https://wikitext.smerity.com/wikitext-2-v1.zip",
                "md5",
                "542ccefacc6c27f945fb54453812b3cd",
            ),
        ),
        # The archive was published at s3.amazonaws.com/research.metamind.io/wikitext/, which
        # has answered 403 Forbidden since early 2024 (pytorch/text#2247, #2255); its author,
        # Stephen Merity, serves the same file name on his own site. The MD5 is the original's,
        # so a copy that differs fails verification.
        checksum_origin="the MD5 pinned by pytorch/text (torchtext/datasets/wikitext2.py) for "
        "wikitext-2-v1.zip as published on research.metamind.io",
    ),
    "wmt16": DataSource(
        name="wmt16",
        files=(_EUROPARL_V7, _COMMONCRAWL, _NEWS_COMMENTARY_V11, _NEWSTEST2014),
        checksum_origin="SHA-256 of the training archives pinned by tensorflow/datasets "
        "(url_checksums/wmt16_translate.txt); MD5 of test-full.tgz pinned by mjpost/sacrebleu "
        "(its wmt14/full test set)",
    ),
    "wmt17": DataSource(
        name="wmt17",
        files=(_NEWS_COMMENTARY_V12, _COMMONCRAWL, _EUROPARL_V7, _NEWSTEST2014),
        checksum_origin="SHA-256 of the training archives pinned by tensorflow/datasets "
        "(url_checksums/wmt17_translate.txt); MD5 of test-full.tgz pinned by mjpost/sacrebleu "
        "(its wmt14/full test set)",
    ),
}


def source(name: str) -> DataSource:
    try:
        return DATASETS[name]
    except KeyError:
        raise RunnerError(
            f"unknown data set {name!r}; choose one of: {', '.join(DATASETS)}"
        ) from None


def prepared_path(name: str, root: Path) -> Path:
    """What the workloads read for data set `name` under `root`."""
    if name == "cifar10":
        return root / CIFAR10_SUBDIR
    if name == "wikitext2":
        return root / WIKITEXT2_SUBDIR
    if name in WMT_SUBDIRS:
        return translation_cache_dir(root, name)
    return epsilon_cache_dir(root)


def is_prepared(name: str, root: Path) -> bool:
    """Whether `name` is ready under `root`. A root that cannot be looked into (no
    permission, a name too long) is not: fetching there then names what is wrong in one line
    (fetch()), where pathlib's is_file() would raise its OSError as a traceback."""
    try:
        return _is_prepared(name, root)
    except OSError:
        return False


def _is_prepared(name: str, root: Path) -> bool:
    path = prepared_path(name, root)
    if name == "cifar10":
        return all((path / f).is_file() for f in CIFAR10_FILES)
    if name == "wikitext2":
        return all((path / f).is_file() for f in WIKITEXT2_FILES)
    if name in WMT_SUBDIRS:
        return wmt.is_prepared(name, root)
    return (path / "meta.json").is_file()


def fetch(
    name: str,
    root: Path,
    mirror: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Download, verify and prepare `name` under `root`; returns what the workloads read.
    Does nothing when it is already prepared (unless `force`). RunnerError, one line, when
    it cannot: the download, the archive or the disk named."""
    src = source(name)
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
    final = prepared_path(name, root)
    found = list(final.parent.glob(f".{final.name}-*"))
    if name in WMT_SUBDIRS:
        raw = wmt.raw_dir(root, name)
        found += raw.parent.glob(f".{raw.name}-*")
    return [path for path in found if path.is_dir() and not path.is_symlink()]


def remove_leftovers(name: str, root: Path) -> None:
    for path in leftovers(name, root):
        log.info("removing %s, left by an interrupted fetch", path)
        shutil.rmtree(path, ignore_errors=True)


def _fetch(
    src: DataSource, root: Path, mirror: str | None, force: bool, progress: Progress | None
) -> Path:
    name = src.name
    downloads = root / "downloads"
    paths = [download(f, downloads, mirror, force, progress) for f in src.files]
    if name == "cifar10":
        return unpack(paths[0], root, CIFAR10_SUBDIR, CIFAR10_FILES)
    if name == "wikitext2":
        return unpack(paths[0], root, WIKITEXT2_SUBDIR, WIKITEXT2_FILES)
    if name in WMT_SUBDIRS:
        return wmt.prepare(name, {p.name: p for p in paths}, root, force, progress)
    return convert_epsilon(src, paths, root, progress)


def download(
    remote: RemoteFile,
    directory: Path,
    mirror: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> Path:
    """`remote` in `directory`, verified; a verified copy already there is reused. The
    `.part` file is this process's alone while it holds the data directory's turn (fetch())."""
    dest = directory / remote.filename
    # Only a regular file of its own is read for reuse: a FIFO or a link to a device (a data
    # directory others write to) would hang the digest, and a link leads out of the directory.
    reusable = dest.is_file() and not dest.is_symlink()
    if reusable and not force and file_digest(dest, remote.algorithm) == remote.digest:
        return dest
    directory.mkdir(parents=True, exist_ok=True)
    url = f"{mirror.rstrip('/')}/{remote.filename}" if mirror else remote.url
    part = dest.with_name(dest.name + ".part")
    try:
        digest = _stream(url, part, remote.algorithm, progress)
        if digest != remote.digest:
            raise RunnerError(
                f"{remote.filename} from {url}: {remote.algorithm} {digest} does not match the "
                f"published {remote.digest}; the download is corrupt or the file changed "
                "upstream. Run the command again; if it persists, the source has changed"
            )
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return dest


def _stream(url: str, part: Path, algorithm: str, progress: Progress | None) -> str:
    """Download `url` into `part`; its digest. What the network or the server does wrong is a
    RunnerError saying to retry; what the local disk does wrong (full, read-only) is left an
    OSError for fetch() to name, since retrying the download would not help."""
    hasher = hashlib.new(algorithm)
    with _network_errors(url):
        request = urllib.request.Request(url, headers={"User-Agent": "stackbench-runner"})
        response = urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
    with response, _create(part) as out:
        total = _content_length(response.headers.get("Content-Length"))
        done = 0
        while True:
            with _network_errors(url):
                chunk = response.read(CHUNK_BYTES)
            if not chunk:
                break
            out.write(chunk)
            hasher.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(part.name.removesuffix(".part"), done, total, "bytes")
    return hasher.hexdigest()


def _create(part: Path) -> BinaryIO:
    """`part` as a new, empty file of this process's. What stands at its name (a killed
    fetch's `.part`, or a link planted in a shared data directory) is removed first and the
    file created exclusively, never opened through a link: "wb" would follow a link and
    overwrite whatever file it leads to with the download."""
    part.unlink(missing_ok=True)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "wb")


@contextlib.contextmanager
def _network_errors(url: str) -> Iterator[None]:
    """A RunnerError for whatever talking to `url` raises: refused, timed out, cut short (a
    chunked body that ends early is http.client.IncompleteRead, no OSError), a server that
    does not speak HTTP (BadStatusLine), a URL urllib cannot parse (ValueError)."""
    try:
        yield
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as err:
        said = " ".join(str(err).split())  # one line, whatever the server sent
        if isinstance(err, http.client.HTTPException) or not said:
            said = f"{type(err).__name__}: {said}" if said else type(err).__name__
        raise RunnerError(
            f"downloading {url} failed ({said}); check the network and retry"
        ) from None


def _content_length(header: str | None) -> int | None:
    """The announced size, for the progress bar only; None when absent or garbage."""
    try:
        return int(header or 0) or None
    except ValueError:
        return None


def file_digest(path: Path, algorithm: str) -> str:
    hasher = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


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
