"""Reading beneath the results directory for the dashboard: never out of it, never through a
symbolic link, never past a size cap, and growing files read incrementally.

A path from a request arrives as names; each must be a plain name (letters, digits, `.`, `_`,
`-`, not starting with a dot), so `..`, absolute paths, hidden files and empty parts never
resolve. Every directory on the way is opened relative to its parent with O_NOFOLLOW, so a
link anywhere on the path is refused rather than followed, even one swapped in while we read.
The results directory itself is taken as given (pointing it through a link is the user's
choice). Problems are contract.files.DamagedFile, as elsewhere in the project.

Not here: what any file means (runner.dashboard.data).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.files import DamagedFile

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
# How much one tail read returns: a live run appends KiB a second; a larger backlog (a
# fetched log, a reconnecting browser) arrives over a few reads instead of one huge message.
TAIL_CHUNK_BYTES = 1 << 20


class InvalidPath(ValueError):
    """A requested path that cannot name a file beneath the results directory."""


def valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and ".." not in name


def split_path(text: str) -> tuple[str, ...]:
    """'logs/rank-0.log' -> ('logs', 'rank-0.log'); InvalidPath for anything else."""
    parts = tuple(text.split("/"))
    if not parts or not all(valid_name(p) for p in parts):
        raise InvalidPath(f"{text!r} is not a path inside a run directory")
    return parts


def open_beneath(root: Path, parts: Sequence[str]) -> int:
    """A read-only descriptor of the regular file root/parts..., opened without following any
    link. FileNotFoundError when it is missing; DamagedFile when it is a link, not a regular
    file or unreadable (permissions); InvalidPath when a part is not a plain name."""
    if not parts or not all(valid_name(p) for p in parts):
        raise InvalidPath(f"{'/'.join(parts)!r} is not a path beneath {root}")
    rel = Path(*parts)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for part in parts[:-1]:  # each step closes the directory it started from, success or not
        fd = _step(fd, part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, rel)
    fd = _step(fd, parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, rel)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DamagedFile(rel, "is not a regular file")
    return fd


def _step(dir_fd: int, name: str, flags: int, rel: Path) -> int:
    """Open `name` in `dir_fd`, closing `dir_fd` either way."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise DamagedFile(rel, _refusal(dir_fd, name, err, bool(flags & os.O_DIRECTORY))) from None
    finally:
        os.close(dir_fd)


def _refusal(dir_fd: int, name: str, err: OSError, on_the_way: bool) -> str:
    """Why `name` in `dir_fd` (the file, or a folder on the way to it) could not be opened,
    in words that are true: Linux answers ENOTDIR both for a link on the way (O_DIRECTORY
    with O_NOFOLLOW) and for a regular file on the way (logs/rank-0.log/x), so the entry
    itself is looked at, never followed."""
    if err.errno not in (errno.ELOOP, errno.ENOTDIR):
        return f"cannot be read ({err.strerror or err})"
    try:
        linked = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:  # gone meanwhile
        linked = err.errno == errno.ELOOP
    if not on_the_way:
        return "is a symbolic link: never followed" if linked else "is not a regular file"
    if linked:
        return f"lies under a symbolic link ({name}): never followed"
    return f"lies under {name}, which is not a folder"


def read_beneath(root: Path, parts: Sequence[str], max_bytes: int) -> bytes:
    """The whole file, or DamagedFile when it is larger than `max_bytes`."""
    with os.fdopen(open_beneath(root, parts), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise DamagedFile(Path(*parts), f"is {size} bytes, over the {max_bytes}-byte cap")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DamagedFile(Path(*parts), f"grew over the {max_bytes}-byte cap while being read")
    return data


def is_plain_dir(path: Path) -> bool:
    """A directory that is not a link (lstat, so a link is never followed)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Entry:
    path: str  # relative, '/'-separated
    size: int | None  # None unless a regular file
    # "file"; "unnamed": a regular file whose path is not plain names (hidden, spaces, `<`,
    # bytes that are not UTF-8), which split_path refuses, so it is never served or linked;
    # "link" (never followed); "other"
    kind: str


def scan(directory: Path, max_entries: int = 500, max_depth: int = 3) -> list[Entry]:
    """Everything under `directory`, sorted, without entering links; at most `max_entries`,
    `max_depth` levels down. Every folder, `directory` itself included, is opened relative to
    its parent without following a link, so a run directory swapped for a link since the
    caller checked it lists nothing rather than the link's target."""
    out: list[Entry] = []

    def walk(fd: int, prefix: str, depth: int) -> None:
        with contextlib.suppress(OSError), os.scandir(fd) as it:
            for entry in sorted(it, key=lambda e: e.name):
                if len(out) >= max_entries:
                    return
                rel = prefix + _shown(entry.name)
                if entry.is_symlink():
                    out.append(Entry(rel, None, "link"))
                elif entry.is_dir(follow_symlinks=False):
                    if depth < max_depth:
                        # A folder that cannot be opened (no permission, swapped for a
                        # link) lists nothing; its siblings are still listed.
                        with contextlib.suppress(OSError), _folder(fd, entry.name) as sub:
                            walk(sub, rel + "/", depth + 1)
                elif entry.is_file(follow_symlinks=False):
                    kind = "file" if _servable(rel) else "unnamed"
                    out.append(Entry(rel, entry.stat(follow_symlinks=False).st_size, kind))
                else:
                    out.append(Entry(rel, None, "other"))

    with contextlib.suppress(OSError):
        parent = os.open(directory.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with _folder(parent, directory.name) as fd:
                walk(fd, "", 1)
        finally:
            os.close(parent)
    return out


def _shown(name: str) -> str:
    """A name as text: bytes that are not UTF-8 (surrogate escapes in `name`) become U+FFFD;
    as lone surrogates they would reach the page as a string it cannot handle."""
    return os.fsencode(name).decode("utf-8", errors="replace")


def _servable(rel: str) -> bool:
    """Whether a request can name the file at `rel`: the page links a file only then."""
    try:
        split_path(rel)
    except InvalidPath:
        return False
    return True


@contextlib.contextmanager
def _folder(dir_fd: int, name: str) -> Iterator[int]:
    """A descriptor of the folder `name` in `dir_fd`, opened without following a link
    (OSError when it is one), closed on exit."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


class ByteTail:
    """Bytes appended to a file beneath a root since the last read. A file that was replaced
    (another inode: a fetch rewrote it) or truncated starts over, and the read says so."""

    def __init__(self, root: Path, parts: Sequence[str], last_bytes: int | None = None) -> None:
        self._root, self._parts = root, tuple(parts)
        self._last_bytes = last_bytes  # None: from the start; a log view starts near its end
        self._inode: int | None = None
        self.offset = 0

    def read(self) -> tuple[bytes, bool]:
        """(new bytes, whether the file started over). Missing file: (b'', False)."""
        try:
            fd = open_beneath(self._root, self._parts)
        except FileNotFoundError:
            return b"", False
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            reset = self._inode is not None and (
                info.st_ino != self._inode or info.st_size < self.offset
            )
            if self._inode is None or reset:
                self._inode = info.st_ino
                skip = 0 if self._last_bytes is None else info.st_size - self._last_bytes
                self.offset = max(0, skip)
            f.seek(self.offset)
            data = f.read(TAIL_CHUNK_BYTES)
        self.offset += len(data)
        return data, reset


class LineTail(ByteTail):
    """Like ByteTail, but only whole lines: a line still being written waits for its newline.
    A line longer than a chunk is not a line of ours; it is skipped."""

    def read(self) -> tuple[bytes, bool]:
        data, reset = super().read()
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == TAIL_CHUNK_BYTES:
            return b"", reset  # skip the over-long line: offset already moved past this chunk
        self.offset -= len(data) - end
        return data[:end], reset
