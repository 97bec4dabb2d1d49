"""Supervises one local run: runs exactly its request, records the outcome, leaves nothing.

Started by LocalBackend.submit (`command`: RUN_DIR, the digest of its launch.json) in a
session of its own, so the run survives the CLI that started it (`--detach`) and a Ctrl-C in
that terminal reaches only the CLI, which then cancels through this process. It runs the
processes of launch.json (the request `runner submit --dry-run` shows: the very bytes submit
wrote, which the digest proves) and is the only writer of state.json while it lives. SIGTERM,
SIGINT or SIGHUP cancel: every process of the run gets SIGTERM, and whatever is left after a
grace period SIGKILL. So does the end of the command that
follows the run, a SIGKILLed one included, unless it let the run go (leash.py). If this
process is SIGKILLed, the kernel ends the workers (workloads/lifetime.py), and the next command
that reads the run records it FAILED (LocalBackend.status).

An elastic run (--workers MIN:MAX, runner/backends/local/elastic.py): the supervisor also
hosts the workers' store, and the run goes on until every worker has ended, since a worker's
death is a change of workers, not the run's end. It answers `runner join` (joins.serve): one more
worker while fewer than MAX are alive and the writer (worker 0) still runs; worker n (n >= MAX
for a joiner) is process n and writes rank-n.log.

The outcome: exit codes decide, never a summary written before a crash. A run SUCCEEDED only
when every process exited 0 and summary.json exists (an elastic one: its writer and at least
MIN workers, the others named in the reason); a failure names the first failed rank, its
exit code (and signal) and its first error line; a full or read-only disk is named as such,
since a worker that cannot write cannot say so in its own log either.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import psutil

from contract import files
from contract.files import DamagedFile
from contract.rundir import (
    LOGS,
    MAX_REASON_CHARS,
    STATE,
    SUMMARY,
    JobState,
    JobStatus,
    rank_log,
)
from runner.backends.base import LocalRequest
from runner.backends.local import joins, leash, processes
from runner.backends.local.elastic import StoreUnavailable, hosted_store
from runner.backends.local.launch import (
    LAUNCH_FILE,
    Started,
    launch,
    read_request,
    start,
    start_failure,
)
from runner.backends.local.network import NetworkUnavailable
from workloads import lifetime

POLL_S = 0.05  # how often joins and signals are looked at (an exit wakes the loop at once)
GRACE_S = 10.0
CANCELLED = "cancelled by the user"
# Its follower ended without a word: killed (Ctrl-C, SIGTERM and SIGHUP cancel in its name).
LEASH_SNAPPED = (
    "cancelled: the runner command following it was killed (a followed run ends with it; "
    "`runner submit --detach` starts one that does not)"
)
LAUNCHER_LOG = "launcher.log"
# An exception line as Python prints it, possibly behind torch's `[rank0]:` prefix.
# Prefixes may repeat ("[rank0]: [rank0]: ..."): an elastic worker's re-raised errors carry one
# per layer that printed them.
_ERROR_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)*\s*(?:[A-Za-z_][\w]*\.)*"
    r"([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Diverged)\b:?.*)$"
)
_STACKBENCH_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)*\s*stackbench: (.+)$")


def command(run_dir: Path, request_digest: str, leash_fd: int | None = None) -> list[str]:
    """The supervisor's command line for the run at `run_dir`: `request_digest` is the digest
    of the launch.json it must run (launch.digest), `leash_fd` the read end of the submitting
    command's leash (leash.py), if it tied one. On argv, not in the environment, which the
    workers inherit."""
    leash_args = [] if leash_fd is None else ["--leash", str(leash_fd)]
    module = "runner.backends.local.supervisor"
    return [sys.executable, "-m", module, str(run_dir), "--digest", request_digest, *leash_args]


def supervise(run_dir: Path, request_digest: str, leash_fd: int | None = None) -> JobStatus:
    """Run the request in `run_dir` to its end and record the outcome: only the launch.json
    whose digest is `request_digest`. `leash_fd`: the read end of the submitting command's
    leash (leash.py), if it tied one."""
    run_dir = run_dir.resolve()  # the workers run inside it; relative paths would nest
    try:
        request = read_request(run_dir, request_digest)
    except (FileNotFoundError, DamagedFile) as err:
        # Damaged or rewritten since submit wrote it: nothing is started, and the run says
        # why in one line rather than reading "the supervisor died".
        problem = err if isinstance(err, DamagedFile) else f"{run_dir / LAUNCH_FILE} is missing"
        status = JobStatus(JobState.FAILED, f"cannot start the run: {problem}", since=_now())
        record(run_dir, status)
        return status
    lifetime.become_subreaper()  # orphans of the run come back here, never to init
    stop: list[str] = []  # why the run is being cancelled, once it is
    listener = leash.Listener(leash_fd)

    def on_signal(signum: int, frame: object) -> None:
        stop.append(CANCELLED)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        # The request's network (shaped links, when it has one) lives as long as this block;
        # a SIGKILLed supervisor takes it with it (runner/backends/local/network.py), as it
        # takes an elastic run's store (its socket dies with the process).
        with launch(request) as network, hosted_store(request.store_port):
            status = _run(run_dir, request, network, stop, listener)
    except (NetworkUnavailable, StoreUnavailable) as err:
        status = JobStatus(JobState.FAILED, str(err), since=_now())
    _end_orphans()
    record(run_dir, status)
    return status


def _end_orphans() -> None:
    """End every process still below this one once the run's network is gone (its namespace
    holders are children too). A descendant that left the run's environment (`env -i`, a
    daemon) is no `processes.members`, but an orphan comes back to this subreaper: left
    here, it would go on to init when this process exits, outliving the run."""
    with contextlib.suppress(psutil.Error):
        processes.end(psutil.Process().children(recursive=True), GRACE_S)


def _run(
    run_dir: Path,
    request: LocalRequest,
    network: Started,
    stop: list[str],
    listener: leash.Listener,
) -> JobStatus:
    exits = processes.Exits()
    for i, p in enumerate(request.processes):
        try:
            exits.add(start(p, network, _launcher_log(run_dir, i, request)))
        except OSError as err:  # its log a link, its directory or program gone
            _stop(run_dir, exits)
            why = f"cannot start process {i}: {start_failure(err)}"
            return _failed(why, storage_problem(run_dir))
    record(run_dir, JobStatus(JobState.RUNNING, since=_now()))
    # An elastic run goes on while workers are left: they decide among themselves whether
    # the survivors can go on (workloads/adaptive/elastic/session.py), so one's end is not
    # the run's. A fixed one ends at its first failure: the others cannot go on without it.
    elastic = request.min_workers is not None
    writer_ended: float | None = None  # when worker 0, which ends an elastic run, exited
    stuck: list[int] = []  # the workers still running GRACE_S after it, then stopped
    broken: str | None = None  # why the shaped network stopped carrying anything
    unsent: dict[str, tuple[bool, str]] = {}  # join answers the disk has not taken yet
    while not stop and not exits.all_exited():
        if not elastic and exits.first_failure() is not None:
            break
        broken = network.broken()
        if broken is not None:  # the ranks would wait on each other until gloo's timeout
            break
        if elastic and exits.codes()[0] is not None:
            # The others end within moments of worker 0; one that does not is stuck (stopped,
            # or waiting on a peer that is gone) and would hold the run RUNNING for ever.
            writer_ended = writer_ended or time.monotonic()
            if time.monotonic() - writer_ended > GRACE_S:
                stuck = [i for i, code in enumerate(exits.codes()) if code is None]
                break
        if listener.snapped():
            stop.append(LEASH_SNAPPED)
            break
        if elastic:
            joins.serve(run_dir, request, network, exits, unsent)
        exits.wait(POLL_S)
    _stop(run_dir, exits)
    codes = [p.returncode for p in exits.processes]
    if request.min_workers is not None and not stop:
        return elastic_outcome(run_dir, request.min_workers, len(request.processes), codes, stuck)
    cancelled = stop[0] if stop else None
    if broken is not None and cancelled is None:
        return _failed(broken, storage_problem(run_dir))
    return outcome(run_dir, request, codes, cancelled, first_failed=exits.first_failure())


def _stop(run_dir: Path, exits: processes.Exits) -> None:
    """End every process of the run (those it started, and whatever they started) and reap
    the ones started here."""
    started = []
    for proc in exits.processes:  # not only members: a process's env may hide the run's
        with contextlib.suppress(psutil.Error):  # reaped meanwhile
            if proc.returncode is None:
                started.append(psutil.Process(proc.pid))
    processes.end([*processes.members(run_dir.name, run_dir), *started], GRACE_S)
    for proc in exits.processes:
        proc.wait()


def _launcher_log(run_dir: Path, index: int, request: LocalRequest) -> Path:
    name = LAUNCHER_LOG if len(request.processes) == 1 else f"launcher-{index}.log"
    return run_dir / LOGS / name


def elastic_outcome(
    run_dir: Path,
    min_workers: int,
    max_workers: int,
    returncodes: Sequence[int | None],
    stuck: Sequence[int] = (),
) -> JobStatus:
    """An elastic run (worker i is process i and writes rank-i.log; workers `max_workers`
    on joined with `runner join`) SUCCEEDED when its writer (w0) finished it, wrote the
    summary and at least `min_workers` exited 0: "finished with N of MAX workers", the
    workers that left named, those `stuck` (still running GRACE_S after worker 0 ended, then
    stopped) said to be, and a joiner's own line given (it may never have been admitted).
    Otherwise the reason is a worker's own line (too few workers left, the writer gone)
    before any worker's exit code."""
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
                         since=_now())  # fmt: skip
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
    return _failed(reason, disk, failed_rank=worker, exit_code=code)


def _departure(run_dir: Path, i: int, code: int | None, stuck: bool, max_workers: int) -> str:
    """How worker i left, in a clause. A joiner (i >= MAX) says why in its own words: one the
    run ended before admitting is not a worker the run lost."""
    joined = i >= max_workers
    who = f"worker {i}, which joined," if joined else f"worker {i}"
    if stuck:
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
        return JobStatus(JobState.CANCELLED, cancelled, since=_now())
    if all(code == 0 for code in returncodes) and wrote_summary(run_dir):
        return JobStatus(JobState.SUCCEEDED, since=_now())
    disk = storage_problem(run_dir)
    failed = [i for i, code in enumerate(returncodes) if code != 0]
    if not failed:
        return _failed(f"every process exited 0 but the run wrote no {SUMMARY}", disk, exit_code=0)
    rank = first_failed if first_failed in failed else failed[0]
    code = returncodes[rank]
    reason = f"rank {rank} exited with code {code}{signal_note(code)}"
    # Its own log first; what it printed before it had one (an import error) otherwise.
    line = first_error_line(_read(rank_log(run_dir, rank))) or first_error_line(
        _read(_launcher_log(run_dir, rank, request))
    )
    if line:
        reason += f": {line}"
    return _failed(reason, disk, failed_rank=rank, exit_code=code)


def wrote_summary(run_dir: Path) -> bool:
    """Whether the run's summary.json is a regular file of the run: a link (to any file
    outside, which is_file() would follow) is no summary the run wrote."""
    try:
        return stat.S_ISREG(os.lstat(run_dir / SUMMARY).st_mode)
    except OSError:
        return False


def _failed(reason: str, disk: str | None, **fields: int | None) -> JobStatus:
    if disk:
        reason = f"{disk} ({reason})"
    return JobStatus(JobState.FAILED, reason, since=_now(), **fields)


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
            # Non-blocking: a FIFO planted there would wait for a reader for ever, deaf to
            # SIGTERM (the open is retried after the handler); only a regular file is ours.
            fd = os.open(run_dir / STATE, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(errno.EINVAL, "is not a regular file")
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


def _now() -> str:
    return datetime.now(UTC).isoformat()


def main() -> int:
    # As `command` writes it: RUN_DIR --digest SHA256 [--leash FD]. Without a digest, no
    # request matches, and the run fails saying so.
    run_dir, *rest = sys.argv[1:]
    options = dict(zip(rest[::2], rest[1::2], strict=False))
    leash = options.get("--leash")
    status = supervise(Path(run_dir), options.get("--digest", ""), int(leash) if leash else None)
    return 0 if status.state is JobState.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
