"""Disks that refuse writes, for real: a small tmpfs of its own per test, filled up or
remounted read-only, and what a command run on one says. Mounting needs root (as in CI);
where it is not permitted, a test skips and says so."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); these faults need root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def fill(directory: Path) -> None:
    """Write until the file system says it is full."""
    with open(directory / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as err:
            assert err.errno == errno.ENOSPC


def runner(results: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`runner --results-dir RESULTS ARGS`, in a process of its own, wide enough for one line."""
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(results), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "250", **env},
    )  # fmt: skip


def leftovers(root: Path) -> list[str]:
    """What is under `root`, the filler aside, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != "filler")
