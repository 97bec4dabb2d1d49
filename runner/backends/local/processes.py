"""The processes of a local run: how they are tied to it, and how they are ended.

Every process of a run carries the run in its environment (STACKBENCH_RUN_ID and
STACKBENCH_RUN_DIR, set by the backend for the supervisor and inherited by the workers).
That is the proof of membership: a pid read from a file (supervisor.json) may be stale,
recycled or forged, so nothing is ever signalled on a pid alone; only a process of this
user whose own environment names this run, checked at the moment it is signalled.

Lifetime: no process of a run outlives its owner (workloads/runtime/lifetime.py): the supervisor is
a child subreaper and starts every worker with a parent-death signal (each worker arms one for
itself too), so a SIGKILLed supervisor takes the workers with it; what is left is found by
`members` and ended.

Before the supervisor is on record (supervisor.json names it once it runs), a run is being
started: its start lock (runner/flock.py, on logs/supervisor.log) is held from just after
job.json exists by the submitting command, then by the supervisor, which inherits it as its
stdout; the kernel drops it when both are gone (killed ones included), so a run being started
is told from one whose starter died.

`Exits` is how the supervisor learns of each process's end: the moment it comes, and in the
order they came, which names the rank that failed first (the others often fail after it,
because it left).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

import psutil

RUN_ID_ENV = "STACKBENCH_RUN_ID"
RUN_DIR_ENV = "STACKBENCH_RUN_DIR"


def run_env(run_id: str, run_dir: Path) -> dict[str, str]:
    """What every process of the run carries: the proof that it belongs to the run."""
    return {RUN_ID_ENV: run_id, RUN_DIR_ENV: str(run_dir.resolve())}


def belongs(proc: psutil.Process, run_id: str, run_dir: Path) -> bool:
    """Whether `proc` is a process of this user started for this run (its own environment says
    so); False for anything that cannot be read or has gone."""
    try:
        if proc.uids().real != os.getuid():
            return False
        env = proc.environ()
    except (psutil.Error, OSError):
        return False
    return env.get(RUN_ID_ENV) == run_id and env.get(RUN_DIR_ENV) == str(run_dir.resolve())


def members(run_id: str, run_dir: Path) -> list[psutil.Process]:
    """Every live process that proves it belongs to the run (zombies excluded)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE and belongs(proc, run_id, run_dir):
                found.append(proc)
    return found


def proven(pid: object, create_time: object, run_id: str, run_dir: Path) -> psutil.Process | None:
    """The process a file names, only if it is the same process (creation time) and proves it
    belongs to the run; None otherwise (gone, recycled, forged, or not a run's process)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if not isinstance(create_time, int | float):
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - float(create_time)) > 1e-3:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return proc if belongs(proc, run_id, run_dir) else None


def end(procs: Iterable[psutil.Process], grace_s: float) -> None:
    """SIGTERM each, then SIGKILL whatever is left after grace_s."""
    procs = list(procs)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
            # A stopped process (SIGSTOP, a debugger, Ctrl-Z) holds SIGTERM pending until it
            # is continued: it would sit out the grace and die by SIGKILL, its handler unrun.
            proc.resume()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


class Exits:
    """Watches started processes: which have exited, in the order they did, and a wake-up the
    moment one does (one thread per process, parked in wait())."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.order: list[int] = []  # indices into `processes`, in the order they exited
        self.changed = threading.Event()

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        """Watch `proc`. OSError, `proc` ended and not watched, when no thread can be had to
        watch it (a task or memory limit): a process nobody waits on would never count as
        exited, and the run would wait on it for ever."""
        index = len(self.processes)
        self.processes.append(proc)
        try:
            threading.Thread(target=self._wait, args=(index,), daemon=True).start()
        except RuntimeError as err:  # "can't start new thread"
            self.processes.pop()
            proc.kill()
            proc.wait()
            raise OSError(errno.EAGAIN, f"cannot watch its process ({err})") from None

    def _wait(self, index: int) -> None:
        self.processes[index].wait()
        self.order.append(index)  # one append per thread: atomic, in the order they woke
        self.changed.set()

    def wait(self, timeout_s: float) -> None:
        """Until a process exits or `timeout_s` passes."""
        self.changed.wait(timeout_s)
        self.changed.clear()

    def codes(self) -> list[int | None]:
        """Each process's exit code, None while it runs (as far as the watch has seen)."""
        exited = set(self.order)
        return [p.returncode if i in exited else None for i, p in enumerate(self.processes)]

    def all_exited(self) -> bool:
        return len(self.order) == len(self.processes)

    def first_failure(self) -> int | None:
        """The index of the first process that exited non-zero."""
        return next((i for i in list(self.order) if self.processes[i].returncode != 0), None)
