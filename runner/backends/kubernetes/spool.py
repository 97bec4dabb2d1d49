"""Lines written to files as they come, never gathered in memory: a pod's log, however long,
goes straight to its ranks' files on disk. Each file appears whole or not at all: it is written
beside its place under a temporary name and moved there on `commit` (as contract/files.py writes
every record), so a fetch cut short leaves the previous copy, never half of one. A link planted
at a file's place is replaced, never written through; one in place of its folder is refused
(contract.files.open_folder).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from contract import files

BUFFER_BYTES = 1 << 20


class Spool:
    """Files being written line by line; `with` commits them all on success, drops them all
    on an error."""

    def __init__(self) -> None:
        self._open: dict[Path, tuple[int, str, BinaryIO]] = {}  # path -> (folder, temp, file)

    def __enter__(self) -> Spool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()

    def open(self, path: Path) -> None:
        """Start `path` (empty if nothing is written to it)."""
        if path in self._open:
            return
        folder = files.open_folder(path.parent)
        try:
            tmp = _create_temp(folder, path.name)
            fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW, dir_fd=folder)
        except BaseException:
            os.close(folder)
            raise
        self._open[path] = (folder, tmp, os.fdopen(fd, "wb", buffering=BUFFER_BYTES))

    def write(self, path: Path, line: str) -> None:
        self.open(path)
        self._open[path][2].write(line.encode("utf-8", errors="replace") + b"\n")

    def commit(self) -> None:
        try:
            for path, (folder, tmp, f) in self._open.items():
                f.close()
                os.chmod(tmp, 0o644, dir_fd=folder)  # results are meant to be shared
                os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            self.abort()
            raise
        self._close_folders()

    def abort(self) -> None:
        for folder, tmp, f in self._open.values():
            with contextlib.suppress(OSError):
                f.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
        self._close_folders()

    def _close_folders(self) -> None:
        for folder, _, _ in self._open.values():
            with contextlib.suppress(OSError):
                os.close(folder)
        self._open.clear()


def _create_temp(folder: int, name: str) -> str:
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            os.close(os.open(tmp, flags, 0o600, dir_fd=folder))
        except FileExistsError:
            continue
        return tmp
