"""The leash: a followed local run ends with the command that follows it, however that ends.

`runner submit` (and `runner sweep`) cancel their run on Ctrl-C, SIGTERM and SIGHUP, but a
SIGKILL (the OOM killer, `kill -9`, a CI runner's timeout) leaves them no chance to, and the
supervisor runs in a session of its own (so that `--detach` can work): without a leash the run
would go on with nobody to follow, cancel or fetch it. So the submitting command keeps the
write end of a pipe whose read end only the supervisor has. The kernel closes the write end
when the command ends, any way it ends: end of file with no word before it means the command
is gone, and the supervisor cancels the run as a SIGTERM would. A command that lets its run go
on (`--detach`, or after it has followed the run to its end) says so first: `release` writes
RELEASED, after which the supervisor stops listening.

Nothing here survives its owner either: the pipe's ends are closed by the kernel with the
processes that hold them (the write end is not inherited by anything the command starts).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

RELEASED = b"r"
_HELD: dict[Path, int] = {}  # run directory (resolved) -> the write end this process holds


def tie(run_dir: Path) -> int:
    """A new leash for the run at `run_dir`, its write end held by this process until
    `release` or its end; returns the read end, for the supervisor alone (pass it, then close
    it here)."""
    read_end, write_end = os.pipe()  # neither is inherited by a child unless passed on
    release(run_dir)  # a run is started once; a stale leash of the same name lets go
    _HELD[run_dir.resolve()] = write_end
    return read_end


def release(run_dir: Path) -> None:
    """Let the run go on without this process (nothing if it holds no leash for it)."""
    write_end = _HELD.pop(run_dir.resolve(), None)
    if write_end is None:
        return
    with contextlib.suppress(OSError):  # the supervisor may be gone, and the pipe with it
        os.write(write_end, RELEASED)
    os.close(write_end)


class Listener:
    """The supervisor's end: `snapped()` says whether the command holding the leash ended
    without releasing it. `fd` None: an unleashed run (submitted by code that ties none)."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        if fd is not None:
            os.set_blocking(fd, False)

    def snapped(self) -> bool:
        if self._fd is None:
            return False
        try:
            word = os.read(self._fd, len(RELEASED))
        except BlockingIOError:
            return False  # held, and nothing said
        except OSError:
            word = b""
        self.close()
        return word != RELEASED

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
