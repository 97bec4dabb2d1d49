"""Copying a run's result files (events.jsonl, summary.json, manifest.json) from a stack's results
store into its run directory: `file:///dir` directly, `gs://` with the gcloud CLI, `s3://` with
the aws CLI (whichever the user already has, logged in, for that cloud).

The workload writes `<store>/<run-id>/<file>`, but a store can be written by any pod (on kind it
is a hostPath every pod may mount), so nothing in it is trusted:

- a file:// store is read with openat-style calls below a directory opened once: a symbolic
  link is never followed (not for the run's directory, not for a file), anything but a regular
  file (a FIFO, a device, a directory) is refused without being read, and a file swapped for
  something else between the check and the open is refused too (O_NOFOLLOW, and the opened
  file must be the one checked);
- run ids and file names are single path components: no `/`, no `..`; a store path must be
  absolute and without `..`;
- every file and the run as a whole are capped in size (`StoreLimits`): an oversized file is
  refused before a byte is copied (a sparse file's apparent size counts) and a file that grows
  while being read is cut off at the cap and refused. Cloud copies stream through the CLI's
  standard output into the temporary file, with the same caps.

Each file lands in a temporary file beside its destination, is checked by the caller's `check`,
and only then renamed into place. A refused file is reported with why, never copied.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from runner.errors import RunnerError

MIB = 1 << 20
CHUNK_BYTES = MIB
CLOUD_CLIS = {
    "gs": ("gcloud", ["storage", "cat"], "https://cloud.google.com/sdk/docs/install"),
    "s3": ("aws", ["s3", "cp", "--only-show-errors"], "https://aws.amazon.com/cli/"),
}
NOT_FOUND_MARKS = ("404", "no such object", "does not exist", "matched no objects", "nosuchkey")


@dataclass(frozen=True)
class StoreLimits:
    """Caps on what a fetch copies from a results store. A run's result files are a few MiB
    (events of a day-long run included); far more is not a result."""

    max_file_bytes: int = 128 * MIB
    max_run_bytes: int = 256 * MIB
    copy_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.max_file_bytes <= self.max_run_bytes or self.copy_timeout_s <= 0:
            raise ValueError("need 0 < max_file_bytes <= max_run_bytes and copy_timeout_s > 0")


class Refused(Exception):
    """A store file that is not copied; the message says why."""


@dataclass
class Copied:
    """What a fetch from the store did: the files now in the run directory, and those refused."""

    names: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # file name -> why


def fetch_results(
    store: str,
    run_id: str,
    dest: Path,
    names: tuple[str, ...],
    check: Callable[[str, Path], str | None],
    limits: StoreLimits,
) -> Copied:
    """Copy what the store has of the run into dest, each file checked by `check(name, tmp)`
    (a problem or None) before it replaces dest/name. A store that cannot be read at all
    raises RunnerError; a file that may not be copied is in the result's `refused`."""
    scheme, _, rest = store.partition("://")
    source = _LocalRun(_store_path(rest), _component(run_id)) if scheme == "file" else None
    if scheme != "file" and scheme not in CLOUD_CLIS:
        raise RunnerError(f"results store {store!r}: unknown scheme (gs://, s3:// or file://)")
    result, budget = Copied(), limits.max_run_bytes
    try:
        for name in names:
            uri = f"{store.rstrip('/')}/{run_id}/{_component(name)}"
            cap = min(limits.max_file_bytes, budget)
            tmp = _temp_beside(dest / name)
            try:
                if source is not None:
                    size = source.copy(name, tmp, cap, limits)
                else:
                    size = _copy_cloud(scheme, uri, tmp, cap, limits)
                if size is None:
                    continue  # not in the store
                problem = check(name, tmp)
                if problem:
                    raise Refused(problem)
                os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be shared
                os.replace(tmp, dest / name)
                result.names.append(name)
                budget -= size
            except Refused as why:
                result.refused[name] = f"{uri} {why}"
            finally:
                tmp.unlink(missing_ok=True)
    finally:
        if source is not None:
            source.close()
    return result


def _cap_message(size: int | None, cap: int, limits: StoreLimits) -> str:
    what = f"is {size} bytes" if size is not None else "grew while being read"
    which = "max_file_bytes" if cap == limits.max_file_bytes else "max_run_bytes, for the run"
    return (
        f"{what}, over the {cap}-byte cap ({which}); a result file is far smaller, so it was "
        "not copied; if it is genuine, fetch it again with larger caps: "
        "`runner fetch RUN --max-file-mb N --max-run-mb M`"
    )


class _LocalRun:
    """The run's directory in a file:// store, opened once without following links."""

    def __init__(self, root: str, run_id: str) -> None:
        self.where = f"file://{root}/{run_id}"
        self.fd: int | None = None
        self.refused: str | None = None  # why the run's directory is not read
        try:
            root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise RunnerError(
                f"results store file://{root} cannot be read ({err.strerror}); check the "
                "stack's results_store output (`pulumi stack output results_store`)"
            ) from None
        try:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            self.fd = os.open(run_id, flags, dir_fd=root_fd)
        except FileNotFoundError:
            self.fd = None  # nothing of this run in the store
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise RunnerError(f"{self.where} cannot be read ({err.strerror})") from None
            self.refused = "is a symbolic link or not a directory; it is never followed"
        finally:
            os.close(root_fd)

    def copy(self, name: str, tmp: Path, cap: int, limits: StoreLimits) -> int | None:
        """Copy the run's file `name` into tmp; its size, or None when the store lacks it."""
        if self.refused is not None:
            raise Refused(f"(its run directory {self.refused})")
        if self.fd is None:
            return None
        try:
            checked = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        _check_regular(checked, cap, limits)
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=self.fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise Refused("is a symbolic link; it is never followed") from None
            raise Refused(f"cannot be opened ({err.strerror})") from None
        with os.fdopen(fd, "rb") as src:
            opened = os.fstat(src.fileno())
            if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
                raise Refused("was replaced while being read; it is not copied")
            _check_regular(opened, cap, limits)
            with open(tmp, "wb") as out:
                return _copy_capped(src, out, cap, limits)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _check_regular(info: os.stat_result, cap: int, limits: StoreLimits) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise Refused("is a symbolic link; it is never followed")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device, socket or directory"
        raise Refused(f"is {kind}, not a regular file; it is not read")
    if info.st_size > cap:
        raise Refused(_cap_message(info.st_size, cap, limits))


def _copy_capped(src: IO[bytes], out: IO[bytes], cap: int, limits: StoreLimits) -> int:
    size = 0
    while chunk := src.read(min(CHUNK_BYTES, cap + 1 - size)):
        size += len(chunk)
        if size > cap:
            raise Refused(_cap_message(None, cap, limits))
        out.write(chunk)
    return size


def _copy_cloud(scheme: str, uri: str, tmp: Path, cap: int, limits: StoreLimits) -> int | None:
    """Stream one object through the cloud's CLI into tmp; None when it does not exist."""
    tool, args, install = CLOUD_CLIS[scheme]
    exe = shutil.which(tool)
    if exe is None:
        raise RunnerError(f"reading {uri} needs the {tool} CLI, which is not on PATH ({install})")
    argv = [exe, *args, uri] + (["-"] if scheme == "s3" else [])
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as errors, open(tmp, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=errors, start_new_session=True)  # fmt: skip

        def kill() -> None:
            timed_out.set()
            _kill_group(proc)

        timer = threading.Timer(limits.copy_timeout_s, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            size = _copy_capped(proc.stdout, out, cap, limits)
            returncode = proc.wait()
        finally:  # an oversized object or an interrupt: the CLI does not outlive the copy
            timer.cancel()
            _kill_group(proc)
            proc.wait()
        errors.seek(0)
        message = " ".join(errors.read(4096).decode("utf-8", errors="replace").split())
    if returncode == 0:
        return size
    if timed_out.is_set():
        raise RunnerError(
            f"copying {uri} took over {limits.copy_timeout_s:.0f} s; check the network, or "
            f"that `{tool}` is logged in (it may be waiting for a login)"
        )
    if any(mark in message.lower() for mark in NOT_FOUND_MARKS):
        return None
    raise RunnerError(f"`{tool} {' '.join(args)} {uri}` failed: {message or returncode}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The CLI and whatever it started (its own session): they end with the copy."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _store_path(path: str) -> str:
    parts = PurePosixPath(path).parts
    if not path.startswith("/") or ".." in parts or "\0" in path:
        raise RunnerError(
            f"results store file://{path} must be an absolute path without `..`; fix the "
            "stack's results_store output"
        )
    return path.rstrip("/") or "/"


def _component(name: str) -> str:
    """A run id or file name as a single path component."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise RunnerError(f"{name!r} cannot name a file in a results store")
    return name


def _temp_beside(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    return Path(name)
