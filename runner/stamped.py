"""Caches of what the runner derives from code (the benchmarks' cards, the command line's
replies), kept between processes and never used once anything they came from changed.

A cache is stamped with what it was derived from: the interpreter and its sys.path (each
folder's mtime, so a module that would now shadow one is seen), every installed
distribution's metadata files (entry points, version: what a plugin adds) and the inode, size
and mtime of every module file the deriving process imported, with the files of every cache it
read in turn (a reply rendered from cached cards depends on what the cards came from). A
stamp that differs in anything is a miss, so nothing stale is ever used; so is a file that
cannot be trusted whole: not a regular file, a symbolic link, not ours (another user's), too
large, truncated or damaged (its checksum), of another format or shape. A miss is derived again
and the cache replaced, atomically (contract/files.py).

Caches live beside this module's bytecode, where Python keeps its own (__pycache__, or
PYTHONPYCACHEPREFIX's tree), and are not written under PYTHONDONTWRITEBYTECODE; a place that
cannot be written means no cache, never an error. One file per interpreter and sys.path (two
virtual environments on one checkout see different plugins) and per key; each write leaves a
name's KEEP newest files and deletes older ones.

The format is marshal, not JSON, behind a checksum: this module is read on `runner --help`'s
start-up path (runner/cli/start.py), where importing json, pathlib or hashlib would each cost
a share of Python's own start; marshal is built in, and zlib's crc32 catches damage before
marshal reads a byte. Only the standard library's os, sys, stat, marshal and zlib here.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import zlib

TYPE_CHECKING = False  # typing is not imported on the start-up path: a few ms
if TYPE_CHECKING:
    from typing import Any

FORMAT = b"stackbench-stamped-1\n"  # the layout below; another is a miss
MAX_BYTES = 8 << 20  # a stamp of a few thousand files and a few KiB of payload
# The caches of one name kept (the newest written): a reply is 50-60 KB, mostly its stamp.
KEEP = 32
# The files of a distribution's metadata that decide what it adds and under which version.
_DIST_FILES = ("entry_points.txt", "METADATA", "PKG-INFO")
# path -> stamp of every file that a cache this process read was derived from: what this
# process's own output depends on beside the modules it imported.
_consulted: dict[str, list[int] | None] = {}

Stamp = dict[str, "list[int] | None"]


def cache_path(name: str, key: object = None) -> str | None:
    """Where the cache `name` for `key` (a value marshal can write) lives for this
    interpreter and sys.path; None where Python keeps no bytecode for this module."""
    spec = globals().get("__spec__")
    cached = getattr(spec, "cached", None)
    if not isinstance(cached, str):
        return None
    tag = zlib.crc32(repr([sys.executable, sys.path, key]).encode())
    return os.path.join(os.path.dirname(cached), f"{name}.{tag:08x}.cache")


def read(path: str, key: object = None) -> Any:
    """The payload cached at `path` for `key` while nothing it was derived from changed, else
    None (missing, stale, or not to be trusted)."""
    data = load(path)
    if not isinstance(data, dict):
        return None
    try:
        sources = data["sources"]
        if data["key"] != key or data["interpreter"] != interpreter():
            return None
        if not isinstance(sources, dict) or not all(type(p) is str for p in sources):
            return None
        if sources != files_stamp(sources) or data["dists"] != dists_stamp():
            return None
        payload = data["payload"]
    except (KeyError, TypeError):
        return None
    _consulted.update(sources)
    return payload


def write(path: str, payload: Any, started_ns: int, key: object = None) -> None:
    """Cache `payload` (derived by this process from what it imported and the caches it
    read) at `path`; not when one of those files changed after `started_ns` (while it was
    derived: which version was read is unknown), nor under PYTHONDONTWRITEBYTECODE, nor
    where the place cannot be written."""
    if sys.dont_write_bytecode:
        return
    sources = files_stamp(sorted(set(imported_files()) | set(_consulted)))
    if any(s is not None and s[2] >= started_ns for s in sources.values()):
        return
    data = {
        "key": key,
        "interpreter": interpreter(),
        "dists": dists_stamp(),
        "sources": sources,
        "payload": payload,
    }
    blob = encode(data)
    import contextlib  # here: only a miss writes, and reading needs none of these
    from pathlib import Path

    from contract.files import write_bytes

    # A read-only or full disk, a folder not ours, a link in place of it: no cache.
    with contextlib.suppress(OSError):
        write_bytes(Path(path), blob)
        prune(path, KEEP)


def prune(path: str, keep: int) -> None:
    """Leave the `keep` newest-written caches of the name `path` is one of (one per key:
    each terminal width `runner --help` was asked at is one), deleting older ones, so that
    a cache never grows without bound. Only regular files of ours are touched, and one that
    goes meanwhile (another process pruning) is passed over."""
    import contextlib  # only a miss prunes

    folder, base = os.path.split(path)
    name = base.rsplit(".", 2)[0]  # cache_path's f"{name}.{tag:08x}.cache"
    found: list[tuple[int, str]] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            parts = entry.name.rsplit(".", 2)
            if len(parts) != 3 or parts[0] != name or parts[2] != "cache":
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                found.append((st.st_mtime_ns, entry.path))
    for _, old in sorted(found, reverse=True)[keep:]:
        if old != path:
            with contextlib.suppress(OSError):
                os.unlink(old)


def encode(data: Any) -> bytes:
    """A cache file's bytes: the format's line, the checksum of the rest, the rest."""
    body = marshal.dumps(data)
    return FORMAT + zlib.crc32(body).to_bytes(4, "big") + body


def load(path: str) -> Any:
    """What the file at `path` holds (its stamp and payload, unchecked against today) if it is
    a whole, undamaged cache of ours, else None."""
    try:  # O_NONBLOCK: a FIFO planted at the name must not hang the command
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_BYTES:
            return None
        blob = _read_all(fd, st.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)
    head = len(FORMAT) + 4
    if len(blob) < head or not blob.startswith(FORMAT):
        return None
    body = memoryview(blob)[head:]
    if zlib.crc32(body) != int.from_bytes(blob[len(FORMAT) : head], "big"):
        return None  # truncated or damaged
    try:
        return marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None


def _read_all(fd: int, size: int) -> bytes:
    """The file's bytes, up to one past `size` (one that grew meanwhile fails the checksum)."""
    chunks, left = [], size + 1
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def imported_files() -> list[str]:
    """The file of every module imported so far."""
    modules = list(sys.modules.values())
    return [f for m in modules if isinstance(f := getattr(m, "__file__", None), str)]


def interpreter() -> list[Any]:
    """The interpreter and where it imports from: sys.path resolved (a relative entry is
    the working directory's) with each folder's mtime, which changes when a module is
    added to or removed from it."""
    return [sys.executable, sys.version, files_stamp([os.path.abspath(p) for p in sys.path])]


def files_stamp(paths: Any) -> Stamp:
    """path -> [inode, size, mtime_ns], or None for one that is not there (it may appear).
    A file rewritten by rename (as editors and pip write) is a new inode, even within the
    file system's mtime granularity."""
    stamp: Stamp = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamp[path] = None
            continue
        stamp[path] = [st.st_ino, st.st_size, st.st_mtime_ns]
    return stamp


def dists_stamp() -> Stamp:
    """The metadata files of every distribution on sys.path (what importlib.metadata reads
    for entry points and versions), each file's stamp."""
    found: list[str] = []
    for folder in dict.fromkeys(os.path.abspath(p) for p in sys.path):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".dist-info", ".egg-info")):
                found.extend(os.path.join(entry.path, name) for name in _DIST_FILES)
    return files_stamp(sorted(found))
