"""Anonymous namespaces that the kernel removes when their owner dies, however it dies.

A namespace lives as long as something refers to it: a process inside it, an open handle, a
bind mount. So nothing here is ever bind-mounted (no /run/netns names) and each namespace is
held by one *holder* process whose life is tied to its owner's through a *lifeline*: a pipe
whose write end only the owner has (close-on-exec, so no child inherits it), read by every
holder as its standard input.

    lifeline = Lifeline()                          # owner side: the write end
    bridge = spawn(lifeline, Kind.NET)             # a network namespace
    worker = spawn(lifeline, Kind.NET_PID_MOUNT)   # the same, with a PID and a mount namespace
    subprocess.Popen(enter_argv(worker, argv, cwd))  # argv runs in the worker's namespaces
    lifeline.cut()                                 # or the owner's death, even by SIGKILL

A holder is `unshare` running `cat` on the lifeline: when the owner exits or is killed, the
kernel closes the write end, cat reads end-of-file and exits, and its namespaces go. For a
worker, unshare also makes a PID namespace and cat is its first process (its "PID 1"); when
that process exits the kernel kills every other process in the namespace, so whatever ran
inside (a rank, whatever it started) cannot outlive the holder and
keep the network namespace alive. (Should unshare itself be killed, --kill-child takes cat
with it.) The kernel then frees the network namespace and with it its interfaces (a veth pair
goes as soon as either end's namespace goes) and their qdiscs. No step of this needs the owner
to run any code, which is the point: SIGKILL gives it none.

The mount namespace only gives the PID namespace a /proc of its own (as containers do), so
that a process inside reads its own /proc/<pid>; its file systems are the owner's at spawn time.

Not here: what is configured inside the namespaces (network.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import os
import selectors
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000  # linux/sched.h
READY = b"ready\n"
START_TIMEOUT_S = 10.0
# The holder announces itself once its namespaces exist (and /proc is mounted), then becomes
# `cat` on the lifeline, its output discarded.
HOLDER_SCRIPT = "echo ready && exec cat >/dev/null"
# All a holder's environment: enough to find sh and cat. Nothing of the owner's goes with it,
# so a holder never passes for one of the run's processes, which are found by the run named
# in their environment and SIGTERMed at the run's end (processes.py): a PID namespace's first
# process ignores SIGTERM from outside it, so each holder held every shaped run's end for the
# whole grace period, then was SIGKILLed. close() ends the holders, after the ranks.
HOLDER_ENV_KEYS = ("PATH",)


class NamespaceError(RuntimeError):
    """A holder could not be started; the message carries what the tool said."""


class Kind(enum.Enum):
    NET = ("--net",)
    # --kill-child: unshare forks the PID namespace's first process and, should unshare
    # itself be killed, takes that process (and so the namespace) with it.
    NET_PID_MOUNT = ("--net", "--pid", "--mount-proc", "--kill-child")


class Lifeline:
    """The owner's end of the pipe the holders read; cutting it (or dying) ends them. A child
    the owner forks without exec keeps a copy, and the holders with it: a forked owner is
    still the owner."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()  # both close-on-exec: no child inherits them

    @property
    def cut_already(self) -> bool:
        return self._write_fd < 0

    def cut(self) -> None:
        for fd in (self.read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
        self.read_fd = self._write_fd = -1


@dataclass(frozen=True)
class Holder:
    """A holder: the unshare process the owner started. Its namespaces are named through its
    /proc/<pid>/ns files, and this pid cannot name anything else while the holder is alive or
    unreaped (a child's pid is not reused before its parent waits for it); once it has exited,
    those files are gone and nsenter fails rather than enter something else."""

    process: subprocess.Popen[bytes]
    kind: Kind

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def net_inode(self) -> int:
        return os.stat(self.ns_file("net")).st_ino

    def ns_file(self, name: str) -> str:
        return f"/proc/{self.pid}/ns/{name}"

    def alive(self) -> bool:
        return self.process.poll() is None


def spawn(lifeline: Lifeline, kind: Kind, timeout_s: float = START_TIMEOUT_S) -> Holder:
    """A holder of new namespaces of `kind`, ready when this returns."""
    if lifeline.cut_already:
        raise NamespaceError("the lifeline is already cut; open a new network")
    argv = ["unshare", *kind.value, "--", "sh", "-c", HOLDER_SCRIPT]
    env = {key: os.environ[key] for key in HOLDER_ENV_KEYS if key in os.environ}
    process = subprocess.Popen(
        argv, stdin=lifeline.read_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        _await_ready(process, timeout_s)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()
    return Holder(process, kind)


def enter_argv(holder: Holder, argv: Sequence[str], cwd: str) -> list[str]:
    """`argv` run in all of the holder's namespaces, in working directory `cwd` (entering a
    mount namespace moves to its root, so the directory is set again inside)."""
    if holder.kind is Kind.NET:
        return enter_net_argv(holder, argv)
    if not holder.alive():
        raise NamespaceError(f"the holder of these namespaces (pid {holder.pid}) has exited")
    # unshare itself is in the new network and mount namespaces; the PID namespace is the one
    # it created for its children. nsenter forks after entering it (a process cannot move
    # into a PID namespace itself), so argv runs as nsenter's child, inside; nsenter exits
    # with its status.
    return [
        "nsenter", f"--net={holder.ns_file('net')}",
        f"--pid={holder.ns_file('pid_for_children')}", f"--mount={holder.ns_file('mnt')}",
        f"--wd={os.path.abspath(cwd)}", "--", *argv,
    ]  # fmt: skip


def enter_net_argv(holder: Holder, argv: Sequence[str]) -> list[str]:
    """`argv` in the holder's network namespace only (ip and tc need no more)."""
    if not holder.alive():
        raise NamespaceError(f"the holder of this namespace (pid {holder.pid}) has exited")
    return ["nsenter", f"--net={holder.ns_file('net')}", "--", *argv]


def run_batch(holder: Holder, tool: str, commands: Sequence[str], timeout_s: float = 10.0) -> None:
    """Run `ip -batch` or `tc -batch` with `commands` in the holder's network namespace;
    NamespaceError with the tool's message when one of them fails."""
    try:
        done = subprocess.run(
            enter_net_argv(holder, [tool, "-batch", "-"]),
            input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise NamespaceError(f"{tool} did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise NamespaceError(f"{tool} failed: {said[0] if said else f'exit {done.returncode}'}")


def end(holders: Sequence[Holder], lifeline: Lifeline, timeout_s: float = 10.0) -> None:
    """Cut the lifeline and wait for every holder to exit (SIGKILL for one that lingers)."""
    lifeline.cut()
    for holder in holders:
        try:
            holder.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            holder.process.kill()
            holder.process.wait()


def in_namespace(ns_file: str, make: Callable[[], T]) -> T:
    """make() called on a thread that has first entered the network namespace at ns_file."""
    outcome: dict[str, object] = {}

    def enter_and_make() -> None:
        try:
            fd = os.open(ns_file, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            outcome["value"] = make()
        except OSError as err:
            outcome["error"] = err

    thread = threading.Thread(target=enter_and_make)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise NamespaceError(f"cannot work in {ns_file}: {outcome['error']}")
    return outcome["value"]  # type: ignore[return-value]


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def trial(script: str) -> str | None:
    """What `script` said when it failed in a throwaway namespace; None when it succeeded."""
    argv = ["unshare", *Kind.NET_PID_MOUNT.value, "--", "sh", "-c", script]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"cannot try a network namespace here ({err})"
    if done.returncode == 0:
        return None
    return (done.stderr.strip() or f"exit {done.returncode}").splitlines()[0]


def _await_ready(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    assert process.stdout is not None and process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout_s)
    line = process.stdout.readline() if ready else b""
    if line == READY:
        return
    if not ready:
        raise NamespaceError(f"unshare did not start within {timeout_s:.0f} s")
    process.wait(timeout=timeout_s)
    said = process.stderr.read().decode(errors="replace").strip().splitlines()
    raise NamespaceError(f"unshare failed: {said[-1] if said else f'exit {process.returncode}'}")
