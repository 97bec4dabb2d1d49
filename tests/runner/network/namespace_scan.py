"""What the lifetime tests look for after a network is gone, across the whole machine: any
process still in one of its network namespaces, any open handle on one, and anything of ours
in the host's own namespace."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from runner.backends.local.network import BRIDGE, SUBNET_PREFIX


def pids_in(inodes: set[int]) -> list[int]:
    """Every process whose network namespace is one of `inodes`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # exited meanwhile, or not ours to read
                if os.stat(entry / "ns" / "net").st_ino in inodes:
                    found.append(int(entry.name))
    return found


def handles_on(inodes: set[int]) -> list[str]:
    """Every open file descriptor, in any process, on one of the namespaces `inodes`."""
    wanted = {f"net:[{inode}]" for inode in inodes}
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        found.append(str(fd))
    return found


def running(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` still running (a zombie has ended: it holds no namespace)."""
    alive = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def host_network_mentions_ours() -> list[str]:
    """Lines of the host's interfaces, addresses, routes, qdiscs and iptables rules naming our
    bridge, veths or subnet (the network must never create anything there)."""
    lines = []
    tables = [["iptables", "-w", "-S"]] if shutil.which("iptables") else []
    for argv in (["ip", "-o", "address"], ["ip", "-o", "link"], ["ip", "route"], ["tc", "qdisc"],
                 *tables):  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        lines += [ln for ln in out.splitlines() if _ours(ln)]
    return lines


def _ours(line: str) -> bool:
    words = line.replace(":", " ").replace("@", " ").split()
    return SUBNET_PREFIX in line or BRIDGE in words or any(w.startswith("veth0") for w in words)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
