"""What a local run's end says: its state from its processes' exit codes and the run's own
files (summary.json, each rank's first error line), and the disk's problem when it has one.
Pure functions of what the supervisor hands them (supervisor.py drives the processes).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from contract import files
from contract.files import DamagedFile
from contract.rundir import LOGS, MAX_REASON_CHARS, SUMMARY, JobState, JobStatus, rank_log
from runner.backends.base import LocalRequest

GRACE_S = 10.0  # how long the supervisor waits for a process it ends, or for a stuck worker
LAUNCHER_LOG = "launcher.log"
# An exception line as Python prints it, possibly behind torch's `[rank0]:` prefix.
# Prefixes may repeat ("[rank0]: [rank0]: ..."): an elastic worker's re-raised errors carry one
# per layer that printed them.
_ERROR_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)*\s*(?:[A-Za-z_][\w]*\.)*"
    r"([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Diverged)\b:?.*)$"
)
_STACKBENCH_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)*\s*stackbench: (.+)$")


def launcher_log(run_dir: Path, index: int, request: LocalRequest) -> Path:
    """Process `index`'s own output, before it has a rank log."""
    name = LAUNCHER_LOG if len(request.processes) == 1 else f"launcher-{index}.log"
    return run_dir / LOGS / name


def elastic_outcome(
    run_dir: Path,
    min_workers: int,
    max_workers: int,
    returncodes: Sequence[int | None],
    stuck: Sequence[int] = (),
) -> JobStatus:
    """An elastic run (worker i is process i and writes rank-i.log; workers `max_workers` on
    joined with `runner join`) SUCCEEDED when its writer (w0) finished it, wrote the summary and at
    least `min_workers` exited 0: "finished with N of MAX workers", the workers that left
    named, those `stuck` (still running GRACE_S after worker 0 ended, or worker 0 itself
    frozen GRACE_S after the run ended, then stopped) said to be, and a joiner's own line
    given (it may never have been admitted). Otherwise the reason is a worker's own line
    (too few workers left, the writer gone) before any worker's exit code."""
    # A stopped worker's code says nothing: processes.end reaps through psutil, and Popen
    # then reads a child reaped before it as exit code 0.
    left = [i for i, code in enumerate(returncodes) if code != 0 or i in stuck]
    finished = [i for i in range(len(returncodes)) if i not in left]
    exits = "; ".join(_departure(run_dir, i, returncodes[i], i in stuck, max_workers) for i in left)
    if returncodes[0] == 0 and wrote_summary(run_dir) and len(finished) >= min_workers:
        # Out of MAX, what the run could have had at once (workers alive at the end were
        # alive together, so never more): joiners replace workers that left, they do not
        # add to what the run could hold.
        note = f"finished with {len(finished)} of {max_workers} workers ({exits})"
        return JobStatus(JobState.SUCCEEDED, note if left else "",
                         since=now())  # fmt: skip
    said = [(i, first_error_line(_read(rank_log(run_dir, i)))) for i in left]
    worker, line = next(((i, ln) for i, ln in said if ln), (left[0] if left else 0, ""))
    code = returncodes[worker]
    if not left:
        reason = f"every worker exited 0 but the run wrote no {SUMMARY}"
    elif line:
        reason = f"{line} ({exits})"
    else:
        reason = exits
    disk = storage_problem(run_dir)
    return failed(reason, disk, failed_rank=worker, exit_code=code)


def _departure(run_dir: Path, i: int, code: int | None, stuck: bool, max_workers: int) -> str:
    """How worker i left, in a clause. A joiner (i >= MAX) says why in its own words: one the
    run ended before admitting is not a worker the run lost."""
    joined = i >= max_workers
    who = f"worker {i}, which joined," if joined else f"worker {i}"
    if stuck and i == 0:
        how = (f"worker 0 (the writer) was still running but unresponsive (stopped or frozen: "
               f"no heartbeat) {GRACE_S:g} s after the run ended, and was stopped")  # fmt: skip
    elif stuck:
        how = f"{who} was still running {GRACE_S:g} s after worker 0 ended, and was stopped"
    else:
        how = f"{who} exited with code {code}{signal_note(code)}"
    line = first_error_line(_read(rank_log(run_dir, i))) if joined else ""
    return f"{how}: {line}" if line else how


def outcome(
    run_dir: Path,
    request: LocalRequest,
    returncodes: Sequence[int | None],
    cancelled: str | None,
    first_failed: int | None = None,
) -> JobStatus:
    """A fixed-size run's outcome (process i is rank i). `cancelled`: why the run was
    cancelled, if it was. `first_failed`: the rank that exited non-zero first, when the order
    is known (the others often failed because it left)."""
    if cancelled:
        return JobStatus(JobState.CANCELLED, cancelled, since=now())
    if all(code == 0 for code in returncodes) and wrote_summary(run_dir):
        return JobStatus(JobState.SUCCEEDED, since=now())
    disk = storage_problem(run_dir)
    failing = [i for i, code in enumerate(returncodes) if code != 0]
    if not failing:
        return failed(f"every process exited 0 but the run wrote no {SUMMARY}", disk, exit_code=0)
    rank = first_failed if first_failed in failing else failing[0]
    code = returncodes[rank]
    reason = f"rank {rank} exited with code {code}{signal_note(code)}"
    # Its own log first; what it printed before it had one (an import error) otherwise.
    line = first_error_line(_read(rank_log(run_dir, rank))) or first_error_line(
        _read(launcher_log(run_dir, rank, request))
    )
    if line:
        reason += f": {line}"
    return failed(reason, disk, failed_rank=rank, exit_code=code)


def wrote_summary(run_dir: Path) -> bool:
    """Whether the run's summary.json is a regular file of the run: a link (to any file
    outside, which is_file() would follow) is no summary the run wrote."""
    try:
        return stat.S_ISREG(os.lstat(run_dir / SUMMARY).st_mode)
    except OSError:
        return False


def failed(reason: str, disk: str | None, **fields: int | None) -> JobStatus:
    """FAILED for `reason`, behind the disk's problem when it has one (full, read-only)."""
    if disk:
        reason = f"{disk} ({reason})"
    return JobStatus(JobState.FAILED, reason, since=now(), **fields)


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


def signal_note(code: int | None) -> str:
    """' (killed by SIGX)' for an exit code that is a signal's, else ''."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-code).name})"
    return ""


def _read(path: Path, tail_bytes: int = 1 << 20) -> str:
    """The last `tail_bytes` of a log (where a crash is reported), never through a link at
    its name or in place of its folder ("" then: a line from outside is not the run's)."""
    try:
        fd = files.open_regular_in_folder(path)
    except (OSError, DamagedFile):
        return ""
    with os.fdopen(fd, "rb") as f:
        with contextlib.suppress(OSError):
            f.seek(max(0, os.fstat(fd).st_size - tail_bytes))
        return f.read(tail_bytes).decode("utf-8", errors="replace")


def now() -> str:
    """The time a state is recorded at, as state.json gives it."""
    return datetime.now(UTC).isoformat()
