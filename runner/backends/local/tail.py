"""Reading a run's growing files while its ranks write them: the new complete events of an
events.jsonl (EventTail) and the lines of a rank's log (follow_lines), a chunk at a time, never
through a link and never blocking on a FIFO or a device put in a file's place.

Not here: which file is whose (contract/rundir.py), the backend that serves them (backend.py).
"""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from contract import files
from contract.events import parse_line
from contract.files import DamagedFile

# How often a follower looks for more of a file, as often as the backend polls a run's state.
POLL_S = 0.05
# What a follower reads of a growing file at once: a file far larger (a sparse one of
# terabytes, a line that never ends) is still read, a chunk at a time, never whole.
CHUNK_BYTES = 1 << 20


class EventTail:
    """New complete events appended to an events.jsonl since the last read."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            fd = _open_regular(self._path)
        except (OSError, DamagedFile):  # not there yet, or not a log: no events to pass on
            return []
        events: list[dict[str, Any]] = []
        with os.fdopen(fd, "rb") as f:
            while chunk := _whole_lines(f, self._offset):
                self._offset += len(chunk)
                text = chunk.decode("utf-8", errors="replace")
                events += [e for e in map(parse_line, text.splitlines()) if e is not None]
        return events


def _whole_lines(f: BinaryIO, offset: int) -> bytes:
    """At most CHUNK_BYTES from `offset`, up to its last newline (a line being written
    waits); a chunk without one is passed whole, a line longer than any event's."""
    f.seek(offset)
    data = f.read(CHUNK_BYTES)
    if len(data) == CHUNK_BYTES and b"\n" not in data:
        return data
    return data[: data.rfind(b"\n") + 1]


def follow_lines(path: Path, finished: Any, follow: bool) -> Iterator[str]:
    """Lines of a growing file; with follow, until `finished()` and the file is drained."""
    offset = 0
    partial = ""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a split character waits
    while True:
        done = finished() if follow else True  # read the flag before draining: no lost tail
        for chunk in _chunks(path, offset):
            offset += len(chunk)
            lines = (partial + decoder.decode(chunk)).split("\n")
            partial = lines.pop()
            yield from lines
            if len(partial) >= CHUNK_BYTES:  # a line that never ends is shown in pieces
                yield partial
                partial = ""
        if done:
            if partial:
                yield partial
            return
        time.sleep(POLL_S)


def _chunks(path: Path, offset: int) -> Iterator[bytes]:
    """What `path` holds from `offset` on, CHUNK_BYTES at a time (nothing: not there, or
    not readable)."""
    try:
        fd = _open_regular(path)
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def _open_regular(path: Path) -> int:
    """A descriptor of the regular file at `path`, never through a link, at its name or in
    place of its folder (logs/ -> elsewhere would show a file from outside the run). A FIFO
    (opened without waiting for a writer) or a device in place of a log is DamagedFile:
    reading one would block a command for ever, or never end."""
    return files.open_regular_in_folder(path)
