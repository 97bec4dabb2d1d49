"""Process lifetime on Linux: no process of a run outlives the one that started it.

`die_with_parent` asks the kernel to SIGKILL the calling process when its parent dies (the
parent-death signal), and exits at once if the parent is already gone; `become_subreaper` makes
orphaned descendants come back to the calling process instead of init. The local supervisor
uses both for the workers it starts, and every workload process calls `die_with_parent` at
its start, so a SIGKILLed supervisor takes the workers with it. Harmless elsewhere
(a pod's processes die with the pod anyway); a no-op off Linux. Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def die_with_parent(expected_parent: int | None = None) -> None:
    """SIGKILL this process when its parent dies; exit now if the parent already has (its
    pid is no longer `expected_parent`, default: the parent at the time of the call)."""
    parent = os.getppid() if expected_parent is None else expected_parent
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # died before the signal was armed
        os._exit(1)


def become_subreaper() -> None:
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {value}): {os.strerror(err)}")
