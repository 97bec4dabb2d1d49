"""Supervises one local run: runs exactly its request, records the outcome, leaves nothing.

Started by LocalBackend.submit as `python -m runner.backends.local.supervisor RUN_DIR` in a
session of its own, so the run survives the CLI that started it (`--detach`) and a Ctrl-C in
that terminal reaches only the CLI, which then cancels through this process. It runs the
processes of launch.json (the request `runner submit --dry-run` shows) and is the only writer
of state.json while it lives. SIGTERM, SIGINT or SIGHUP cancel: every process of the run gets
SIGTERM, and whatever is left after a grace period SIGKILL. If this process is SIGKILLed, the
kernel ends torchrun and the workers (workloads/lifetime.py), and the next command that reads
the run records it FAILED (LocalBackend.status).

The outcome: exit codes decide, never a summary written before a crash. A run SUCCEEDED only
when every process exited 0 and summary.json exists; a failure names the first failed rank, its
exit code (and signal) and its first error line; a full or read-only disk is named as such,
since a worker that cannot write cannot say so in its own log either.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from contract import files
from contract.rundir import LOGS, STATE, SUMMARY, JobState, JobStatus, rank_log
from runner.backends.base import LocalRequest, Process
from runner.backends.local import processes
from runner.backends.local.backend import LAUNCH_FILE, request_from_dict
from runner.backends.local.launch import Started, launch
from runner.backends.local.network import NetworkUnavailable
from workloads import lifetime

POLL_S = 0.05  # how soon the end of the last process is seen
GRACE_S = 10.0
LAUNCHER_LOG = "launcher.log"
MAX_REASON_CHARS = 600  # state.json must stay small enough to rewrite on a full disk
# An exception line as Python prints it, possibly behind torch's `[rank0]:` prefix.
_ERROR_LINE = re.compile(
    r"^(?:\[rank\d+\]:)?\s*(?:[A-Za-z_][\w]*\.)*"
    r"([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Diverged)\b:?.*)$"
)
_STACKBENCH_LINE = re.compile(r"^(?:\[rank\d+\]:)?\s*stackbench: (.+)$")


def supervise(run_dir: Path) -> JobStatus:
    run_dir = run_dir.resolve()  # torchrun runs inside it; relative paths would nest
    request = request_from_dict(files.read_json_object(run_dir / LAUNCH_FILE))
    lifetime.become_subreaper()  # orphans of the run come back here, never to init
    stop: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stop.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        # The request's network (shaped links, when it has one) lives as long as this block;
        # a SIGKILLed supervisor takes it with it (runner/backends/local/network.py).
        with launch(request) as network:
            status = _run(run_dir, request, network, stop)
    except NetworkUnavailable as err:
        status = JobStatus(JobState.FAILED, str(err)[:MAX_REASON_CHARS], since=_now())
    record(run_dir, status)
    return status


def _run(run_dir: Path, request: LocalRequest, network: Started, stop: list[int]) -> JobStatus:
    started = [
        _start(p, network, _launcher_log(run_dir, i, request))
        for i, p in enumerate(request.processes)
    ]
    record(run_dir, JobStatus(JobState.RUNNING, since=_now()))
    while not stop and not _done(started):
        time.sleep(POLL_S)
    processes.end(processes.members(run_dir.name, run_dir), GRACE_S)
    for proc in started:
        proc.wait()
    return outcome(run_dir, request, [p.returncode for p in started], cancelled=bool(stop))


def _start(process: Process, network: Started, log_path: Path) -> subprocess.Popen[bytes]:
    parent = os.getpid()
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            network.argv(process), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env={**os.environ, **process.env, **network.env},
            cwd=process.cwd, preexec_fn=lambda: lifetime.die_with_parent(parent),
        )  # fmt: skip


def _launcher_log(run_dir: Path, index: int, request: LocalRequest) -> Path:
    name = LAUNCHER_LOG if len(request.processes) == 1 else f"launcher-{index}.log"
    return run_dir / LOGS / name


def _done(started: Sequence[subprocess.Popen[bytes]]) -> bool:
    """Every process has exited, or one has failed (the others are then ended)."""
    codes = [p.poll() for p in started]
    return all(c is not None for c in codes) or any(c not in (None, 0) for c in codes)


def outcome(
    run_dir: Path, request: LocalRequest, returncodes: Sequence[int | None], cancelled: bool
) -> JobStatus:
    if cancelled:
        return JobStatus(JobState.CANCELLED, "cancelled by the user", since=_now())
    if all(code == 0 for code in returncodes) and (run_dir / SUMMARY).is_file():
        return JobStatus(JobState.SUCCEEDED, since=_now())
    disk = storage_problem(run_dir)
    failed = [i for i, code in enumerate(returncodes) if code != 0] or [0]
    launcher = _read(_launcher_log(run_dir, failed[0], request))
    rank, code = parse_root_cause(launcher)
    if rank is None:
        code = returncodes[failed[0]]
        log = _launcher_log(run_dir, failed[0], request).name
        reason = f"torchrun exited with code {code}; see {LOGS}/{log}"
        if code == 0:
            reason = f"every process exited 0 but the run wrote no {SUMMARY}"
        return _failed(reason, disk, exit_code=code)
    reason = f"rank {rank} exited with code {code}{signal_note(code)}"
    line = first_error_line(_read(rank_log(run_dir, rank)))
    if line:
        reason += f": {line}"
    return _failed(reason, disk, failed_rank=rank, exit_code=code)


def _failed(reason: str, disk: str | None, **fields: int | None) -> JobStatus:
    if disk:
        reason = f"{disk} ({reason})"
    return JobStatus(JobState.FAILED, reason[:MAX_REASON_CHARS], since=_now(), **fields)  # type: ignore[arg-type]


def parse_root_cause(launcher_text: str) -> tuple[int | None, int | None]:
    """The first failed rank and its exit code, from torchrun's ChildFailedError report."""
    section = launcher_text.rpartition("Root Cause")[2]
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", section, re.MULTILINE)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", section, re.MULTILINE)
    if not (rank and code):
        return None, None
    return int(rank.group(1)), int(code.group(1))


def first_error_line(log_text: str) -> str:
    """What the rank said went wrong: its own `stackbench: ...` line when it wrote one (a
    diverged run, a data error it explains), else the first exception line of its log, with
    torch's `[rankN]:` prefix and the exception's module path stripped."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for line in lines:
        match = _STACKBENCH_LINE.match(line)
        if match:
            return match.group(1)[:MAX_REASON_CHARS]
    for line in lines:
        match = _ERROR_LINE.match(line)
        if match and not line.lstrip().startswith(("File ", "raise ")):
            return match.group(1)[:MAX_REASON_CHARS]
    return ""


def storage_problem(run_dir: Path) -> str | None:
    """Why the run's file system cannot take writes, if it cannot (full or read-only)."""
    try:
        info = os.statvfs(run_dir)
    except OSError:
        return None
    if info.f_flag & os.ST_RDONLY:
        return f"the file system of {run_dir} is read-only"
    if info.f_bavail * info.f_frsize < 64 * 1024:
        return f"no space left on the device of {run_dir}"
    return None


def record(run_dir: Path, status: JobStatus) -> None:
    """Write state.json; on a full disk, overwrite the existing file in place (its blocks are
    already allocated) rather than lose the outcome."""
    try:
        files.write_json(run_dir / STATE, status.to_dict())
    except OSError as err:
        text = json.dumps(status.to_dict(), sort_keys=True).encode()
        try:
            fd = os.open(run_dir / STATE, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                os.pwrite(fd, text, 0)
                os.ftruncate(fd, len(text))
            finally:
                os.close(fd)
        except OSError:
            print(f"cannot record {status.state.value} in {run_dir / STATE}: {err}", flush=True)


def signal_note(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-code).name})"
    return ""


def _read(path: Path, tail_bytes: int = 1 << 20) -> str:
    """The last `tail_bytes` of a log (where a crash is reported), never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        with contextlib.suppress(OSError):
            f.seek(max(0, os.fstat(fd).st_size - tail_bytes))
        return f.read(tail_bytes).decode("utf-8", errors="replace")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def main() -> int:
    status = supervise(Path(sys.argv[1]))
    return 0 if status.state is JobState.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
