"""How every file on a seam is written and read back.

Written whole or not at all: a temporary file beside the target, flushed and renamed into place,
so a reader sees the old file or the new one and a process killed mid-write leaves nothing
half-written; a failed write (a full or read-only disk) removes its temporary file before the
error goes on. Read defensively: a run directory may have been damaged (a crash, a full disk, a
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
import tempfile
from pathlib import Path
from typing import Any

# Run-directory records are a few KiB; a file far larger than this is not one of ours.
MAX_RECORD_BYTES = 16 << 20


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_bytes(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of a regular file, never through a symbolic link. FileNotFoundError when it
    does not exist; DamagedFile when it is something else or larger than `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DamagedFile(path, "is a symbolic link, which is never followed") from None
        raise
    # Checked on the descriptor before it becomes a file object: os.fdopen refuses a directory
    # with IsADirectoryError and leaves the descriptor open.
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise DamagedFile(path, "is not a regular file")
    if info.st_size > max_bytes:
        os.close(fd)
        raise DamagedFile(path, f"is {info.st_size} bytes, over the {max_bytes}-byte cap")
    with os.fdopen(fd, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while being read
        raise DamagedFile(path, f"is over the {max_bytes}-byte cap")
    return data


def read_json(path: Path, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """A JSON document; FileNotFoundError when missing, DamagedFile when unusable."""
    data = read_bytes(path, max_bytes)
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
    data = read_json(path, max_bytes)
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
