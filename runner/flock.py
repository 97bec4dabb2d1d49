"""Liveness by lock: a file whose owner holds an exclusive flock on it for as long as it lives.

The kernel drops a flock when the last descriptor of it closes, a SIGKILLed owner's included, so
a reader tells "its owner lives" from "its owner is gone" without trusting a pid from a file.
Used for a local run being started (runner/backends/local/processes.py) and a sweep being run
(runner/results/study.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def hold(path: Path) -> Iterator[BinaryIO]:
    """`path`, created new and exclusively locked before it appears under its name (a reader
    never sees it unlocked while its owner lives; an older one is replaced), open for
    appending. The lock lasts while this or any process given the file keeps it open."""
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND, 0o644)
    with os.fdopen(fd, "ab") as out:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        yield out


def held(path: Path) -> bool:
    """Whether the lock at `path` is held (by a process that lives); False when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the shared lock, if taken
    return False
