"""How every file on a seam is written and read back.

Written whole or not at all: a temporary file beside the target, flushed and renamed into place,
so a reader sees the old file or the new one and a process killed mid-write leaves nothing
half-written; a failed write (a full or read-only disk) removes its temporary file before the
error goes on. A writer never goes through a link, at the file's name (replaced) or in place of
its folder (refused: LinkedPath), so a planted `logs -> ~/` cannot take a write out of a run
directory. Read defensively: a run directory may have been damaged (a crash, a full disk, a
person) or written by something hostile (a pod on a shared hostPath), so readers never follow a
symbolic link, refuse anything but a regular file, stop at a size cap, and report garbage as a
`DamagedFile` naming the file and the problem instead of raising whatever the parser raised.

Not here: what the files mean (contract/rundir.py), where they live (the runner).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

# Run-directory records are a few KiB; a file far larger than this is not one of ours.
MAX_RECORD_BYTES = 16 << 20
# A folder is opened only to name files relative to it (a dir_fd): O_PATH asks for no read
# permission, so a folder one may write to but not list (mode 0o300) takes writes too. Off
# Linux (no O_PATH), read permission it is.
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW


class DamagedFile(ValueError):
    """A file that exists but cannot be used: not a regular file, a link, too large, not
    UTF-8, not JSON, or JSON of the wrong shape."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def write_text(path: Path, text: str) -> None:
    """Atomically replace `path` with `text` (UTF-8, mode 0644). OSError (ENOSPC, EROFS,
    EACCES) propagates, with no temporary file left behind."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Atomically replace `path` with `data` (mode 0644): a link planted at `path` is
    replaced, never written through, and one in place of its folder (logs/ -> ~/) is
    refused (LinkedPath), so a write never lands outside the directory it names. OSError
    propagates, no temporary file left behind."""
    folder = open_folder(path.parent)
    try:
        _replace_in(folder, path.name, data)
    except OSError as err:
        raise _named(err, path.parent) from None
    finally:
        os.close(folder)


def _named(err: OSError, folder: Path) -> OSError:
    """`err` naming its file in full: a call relative to a folder's descriptor names it by
    its name alone, and the error reaches the user as one line that must say where."""
    if isinstance(err.filename, str) and not os.path.isabs(err.filename):
        err.filename = str(folder / err.filename)
    return err


def _replace_in(folder: int, name: str, data: bytes) -> None:
    """`name` in the open `folder` replaced by `data`: every call is relative to the
    descriptor, so the folder cannot be swapped for a link between the check and the write."""
    tmp = _create_temp(folder, name)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW, dir_fd=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)  # results are meant to be shared
        try:
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError as err:  # said of the file it replaces, not of the temporary one
            err.filename, err.filename2 = name, None
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise


def _create_temp(folder: int, name: str) -> str:
    """A new empty file `.<name>.<random>.tmp` in `folder` (as tempfile.mkstemp names one)."""
    while True:
        tmp = f".{name}.{os.urandom(4).hex()}.tmp"  # not secrets: hashlib at import
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            os.close(os.open(tmp, flags, 0o600, dir_fd=folder))
        except FileExistsError:
            continue
        return tmp


class LinkedPath(OSError):
    """What a writer would write through is a symbolic link (a run directory's logs/ -> ~/):
    never followed, so a write cannot land outside the directory it names. An OSError, so
    that every writer's caller reports it in one line as it reports a disk that refuses."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            errno.ELOOP, "is a symbolic link, which is never written through", str(path)
        )


def open_folder(folder: Path, create: bool = True) -> int:
    """A descriptor of the directory `folder`, made (with its missing parents) if missing and
    `create`. The folder itself is never a link, and a folder made here is made in one that
    is not: LinkedPath otherwise. (Links above the first folder that exists are the user's
    own choice, a results directory on another disk, and are followed.)"""
    flags = _FOLDER_FLAGS
    try:
        return os.open(folder, flags)
    except FileNotFoundError:
        if folder.parent == folder or not create:
            raise
    except OSError:
        if os.path.islink(folder):  # ELOOP, or ENOTDIR for a link to a file
            raise LinkedPath(folder) from None
        raise
    parent = open_folder(folder.parent)
    try:
        try:
            with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
                os.mkdir(folder.name, 0o777, dir_fd=parent)
        except OSError as err:  # a read-only or full disk: said of the folder in full
            raise _named(err, folder.parent) from None
        try:
            return os.open(folder.name, flags, dir_fd=parent)
        except OSError as err:
            if os.path.islink(folder):  # swapped for a link since it was made
                raise LinkedPath(folder) from None
            raise _named(err, folder.parent) from None
    finally:
        os.close(parent)


def open_append(path: Path, mode: int = 0o644) -> int:
    """A descriptor of `path` open for appending, created if missing: never through a link at
    its name or in place of its folder (LinkedPath); for a log a process writes as it runs."""
    folder = open_folder(path.parent)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(path.name, flags, mode, dir_fd=folder)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise LinkedPath(path) from None
            raise _named(err, path.parent) from None
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device planted in its place
        os.close(fd)
        raise OSError(errno.EINVAL, "is not a regular file", str(path))
    os.set_blocking(fd, True)
    return fd


def write_json(path: Path, data: Any) -> None:
    write_bytes(path, json_bytes(data))


def json_bytes(data: Any) -> bytes:
    """Exactly what write_json writes for `data`: for a writer that must know the bytes on
    disk (to hand their digest to the one process that reads them)."""
    return (json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def open_regular_in_folder(path: Path) -> int:
    """A descriptor of the regular file at `path` for reading, never through a link at its
    name or in place of its folder (a run's logs/ -> elsewhere): for files one folder down
    in a run directory, such as its rank logs. FileNotFoundError when either is missing;
    DamagedFile when either is a link or the file is not a regular one (a FIFO, opened
    without waiting for a writer)."""
    try:
        folder = open_folder(path.parent, create=False)
    except LinkedPath:
        raise DamagedFile(path.parent, "is a symbolic link, which is never followed") from None
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DamagedFile(path, "is a symbolic link, which is never followed") from None
        raise _named(err, path.parent) from None
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DamagedFile(path, "is not a regular file")
    return fd


def read_bytes(path: Path, max_bytes: int = MAX_RECORD_BYTES, dir_fd: int | None = None) -> bytes:
    """The bytes of a regular file, never through a symbolic link. FileNotFoundError when it
    does not exist; DamagedFile when it is something else, larger than `max_bytes`, or cannot
    be opened or read (a socket, another user's file, a failing disk): whatever a run
    directory holds, a reader gets a record or a reason, never an OSError of its own.
    `dir_fd`: the folder `path` is in, held open; the file is opened by name in it."""
    where = path if dir_fd is None else path.name
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DamagedFile(path, "is a symbolic link, which is never followed") from None
        raise DamagedFile(path, f"cannot be read ({err.strerror or err})") from None
    try:
        return _read_open(path, fd, max_bytes)
    except OSError as err:  # EIO from a failing disk, a file that became a directory
        raise DamagedFile(path, f"cannot be read ({err.strerror or err})") from None


def _read_open(path: Path, fd: int, max_bytes: int) -> bytes:
    """What `fd` holds, checked on the descriptor (a regular file, within the cap); the
    descriptor is closed whatever happens."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DamagedFile(path, "is not a regular file")
        if info.st_size > max_bytes:
            raise DamagedFile(path, f"is {info.st_size} bytes, over the {max_bytes}-byte cap")
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:  # grew while being read
        raise DamagedFile(path, f"is over the {max_bytes}-byte cap")
    return b"".join(chunks)


def read_json(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """A JSON document; FileNotFoundError when missing, DamagedFile when unusable."""
    return parse_json(path, read_bytes(path, max_bytes))


def parse_json(path: Path, data: bytes) -> Any:
    """The JSON document in `data`, the bytes read from `path`; DamagedFile naming `path`
    when they are not one."""
    if not data.strip():
        raise DamagedFile(path, "is empty")
    try:
        return loads(data.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise DamagedFile(path, "is not UTF-8 text") from None
    except ValueError as err:
        raise DamagedFile(path, f"is not valid JSON ({err})") from None


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """json.loads, with every way untrusted text can fail it a ValueError: nesting deeper than
    the interpreter's recursion limit (`[[[[...`, a few KiB) raises RecursionError, which
    would otherwise escape every reader that expects garbage to be a ValueError."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_json_object(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> dict[str, Any]:
    return parse_json_object(path, read_bytes(path, max_bytes))


def parse_json_object(path: Path, raw: bytes) -> dict[str, Any]:
    """The JSON object in `raw`, the bytes read from `path` (DamagedFile when not one)."""
    data = parse_json(path, raw)
    if not isinstance(data, dict):
        raise DamagedFile(path, f"holds a JSON {type(data).__name__}, not an object")
    return data


def read_lines(path: Path, max_bytes: int) -> list[str]:
    """The complete lines of a text file, decoded leniently (bad bytes become U+FFFD); a last
    line without its newline (a writer killed mid-line) is left out. [] when missing."""
    try:
        data = read_bytes(path, max_bytes)
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    return data[:end].decode("utf-8", errors="replace").splitlines()


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")
