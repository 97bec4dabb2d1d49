"""Downloading one published file for `runner data fetch`, verified against its checksum.

A download streams into a `.part` file created exclusively (never through a link), hashes
as it goes, and is renamed into place only when the digest matches; a verified copy already
there is reused. What the network or the server does wrong is a RunnerError saying to retry;
what the local disk does wrong is left an OSError for runner/datasets/fetch.py to name.
Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from runner.errors import RunnerError

CHUNK_BYTES = 1 << 20
HTTP_TIMEOUT_S = 60.0
# (what, done, total or None, unit): unit "bytes" for downloads, "samples" for conversions.
Progress = Callable[[str, int, int | None, str], None]


@dataclass(frozen=True)
class RemoteFile:
    url: str
    algorithm: Literal["md5", "sha256"]
    digest: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


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
