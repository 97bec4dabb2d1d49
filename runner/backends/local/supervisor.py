"""Supervises one local run: runs exactly its request, records the outcome, leaves nothing.

Started by LocalBackend.submit (`command`: RUN_DIR, the digest of its launch.json) in a
session of its own, so the run survives the CLI that started it (`--detach`) and a Ctrl-C in
that terminal reaches only the CLI, which then cancels through this process. It runs the
processes of launch.json (the request `runner submit --dry-run` shows: the very bytes submit
wrote, which the digest proves) and is the only writer of state.json while it lives. SIGTERM,
SIGINT or SIGHUP cancel: every process of the run gets SIGTERM, and whatever is left after a
grace period SIGKILL. So does the end of the command that
follows the run, a SIGKILLed one included, unless it let the run go (leash.py). If this
process is SIGKILLed, the kernel ends the workers (workloads/runtime/lifetime.py), and the next
command that reads the run records it FAILED (LocalBackend.status).

An elastic run (--workers MIN:MAX, runner/backends/local/elastic.py): the supervisor also
hosts the workers' store, and the run goes on until every worker has ended, since a worker's
death is a change of workers, not the run's end; a worker 0 frozen after the others ended
the run without it (its heartbeat still: elastic.WriterWatch) is stopped, and the run
FAILED. It answers `runner join` (joins.Server): one more worker while fewer than MAX are
alive and the writer (worker 0) still runs; worker n (n >= MAX for a joiner) is process n
and writes rank-n.log.

The outcome: exit codes decide, never a summary written before a crash. A run SUCCEEDED only
when every process exited 0 and summary.json exists (an elastic one: its writer and at least
MIN workers, the others named in the reason); a failure names the first failed rank, its
exit code (and signal) and its first error line; a full or read-only disk is named as such,
since a worker that cannot write cannot say so in its own log either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import signal
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from contract import files
from contract.files import DamagedFile
from contract.rundir import (
    STATE,
    JobState,
    JobStatus,
)
from runner.backends.base import LocalRequest
from runner.backends.local import joins, leash, processes
from runner.backends.local.elastic import StoreUnavailable, WriterWatch, hosted_store
from runner.backends.local.launch import (
    LAUNCH_FILE,
    Started,
    launch,
    read_request,
    start,
    start_failure,
)
from runner.backends.local.network_check import NetworkUnavailable
from runner.backends.local.outcome import (
    GRACE_S,
    elastic_outcome,
    failed,
    launcher_log,
    now,
    outcome,
    storage_problem,
    wrote_summary,
)
from workloads.runtime import lifetime

POLL_S = 0.05  # how often joins and signals are looked at (an exit wakes the loop at once)
HOLDER_SETTLE_S = 1.0  # for a failed rank's namespace holder to be seen gone, if it goes
CANCELLED = "cancelled by the user"
# Its follower ended without a word: killed (Ctrl-C, SIGTERM and SIGHUP cancel in its name).
LEASH_SNAPPED = (
    "cancelled: the runner command following it was killed (a followed run ends with it; "
    "`runner submit --detach` starts one that does not)"
)
# `rm -r` of a live run's directory: nothing can record, follow or cancel the run any more
# (`runner cancel` finds no run), so its processes would train on unowned to max_epochs.
RUN_DIR_DELETED = "cancelled: its run directory was deleted"


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
        status = JobStatus(JobState.FAILED, f"cannot start the run: {problem}", since=now())
        record(run_dir, status)
        return status
    lifetime.become_subreaper()  # orphans of the run come back here, never to init
    stop: list[str] = []  # why the run is being cancelled, once it is
    listener = leash.Listener(leash_fd)

    def on_signal(signum: int, frame: object) -> None:
        stop.append(CANCELLED)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    # Held for the run's length: its link count says when the folder itself was deleted.
    held = os.open(run_dir, os.O_PATH | os.O_DIRECTORY)
    try:
        # The request's network (shaped links, when it has one) lives as long as this block;
        # a SIGKILLed supervisor takes it with it (runner/backends/local/network.py), as it
        # takes an elastic run's store (its socket dies with the process).
        with launch(request) as network, hosted_store(request.store_port) as writer:
            started = dataclasses.replace(network, run_env=writer.env)
            status = _run(run_dir, request, started, stop, listener, writer, held)
    except (NetworkUnavailable, StoreUnavailable) as err:
        status = JobStatus(JobState.FAILED, str(err), since=now())
    finally:
        gone = _deleted(held)
        os.close(held)
    _end_orphans()
    if not gone:  # else writing its state would make the folder again, holding only that
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
    writer: WriterWatch,
    held: int,
) -> JobStatus:
    """`held`: the run directory, open (O_PATH), to see it deleted."""
    exits = processes.Exits()
    for i, p in enumerate(request.processes):
        try:
            exits.add(start(p, network, launcher_log(run_dir, i, request)))
        except OSError as err:  # its log a link, its directory or program gone
            _stop(run_dir, exits)
            why = f"cannot start process {i}: {start_failure(err)}"
            return failed(why, storage_problem(run_dir))
    record(run_dir, JobStatus(JobState.RUNNING, since=now()))
    # An elastic run goes on while workers are left: they decide among themselves whether
    # the survivors can go on (workloads/adaptive/elastic/session.py), so one's end is not
    # the run's. A fixed one ends at its first failure: the others cannot go on without it.
    elastic = request.min_workers is not None
    writer_ended: float | None = None  # when worker 0, which ends an elastic run, exited
    stuck: list[int] = []  # the workers still running GRACE_S after it, then stopped
    broken: str | None = None  # why the shaped network stopped carrying anything
    join_requests = joins.Server(run_dir)  # `runner join`: answered while the run goes on
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
        if elastic and writer.frozen(GRACE_S) and not wrote_summary(run_dir):
            # Worker 0 frozen (SIGSTOPped) while the others ended the run without it: it
            # would never exit, and the run would say RUNNING for ever. One that wrote the
            # summary ended the run itself, and is only slow to exit: its exit code decides.
            stuck = [i for i, code in enumerate(exits.codes()) if code is None]
            break
        if listener.snapped():
            stop.append(LEASH_SNAPPED)
            break
        if _deleted(held):
            stop.append(RUN_DIR_DELETED)
            break
        if elastic:
            join_requests.serve(request, network, exits)
        exits.wait(POLL_S)
    if broken is None and not stop and not elastic and exits.first_failure() is not None:
        # A rank whose namespace died under it (its init killed) exits before the holder
        # does: the broken network is the cause, not the rank's SIGKILL.
        broken = network.broken(settle_s=HOLDER_SETTLE_S)
    _stop(run_dir, exits)
    codes = [p.returncode for p in exits.processes]
    if request.min_workers is not None and not stop:
        return elastic_outcome(run_dir, request.min_workers, len(request.processes), codes, stuck)
    cancelled = stop[0] if stop else None
    if broken is not None and cancelled is None:
        return failed(broken, storage_problem(run_dir))
    return outcome(run_dir, request, codes, cancelled, first_failed=exits.first_failure())


def _deleted(held: int) -> bool:
    """Whether the run directory held open has been removed: a folder has 2 links while it
    exists, 0 once deleted; a handle gone stale (NFS: ESTALE) names no folder either."""
    try:
        return os.fstat(held).st_nlink == 0
    except OSError:
        return True


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


USAGE = "usage: python -m runner.backends.local.supervisor RUN_DIR --digest SHA256 [--leash FD]"


class BadArguments(ValueError):
    """The supervisor's command line is not one `command` writes (one line)."""


def arguments(argv: Sequence[str]) -> tuple[Path, str, int | None]:
    """RUN_DIR, the digest and the leash's read end from a command line as `command` writes
    it. BadArguments otherwise: only `runner submit` starts a supervisor, but someone may run
    the module by hand, and a bad line must not write a state.json into a directory it names
    (or make one), nor read a descriptor that is not a leash."""
    if len(argv) % 2 != 1:
        raise BadArguments("expected RUN_DIR, then options with a value each")
    run_dir, rest = Path(argv[0]), argv[1:]
    options = dict(zip(rest[::2], rest[1::2], strict=True))
    unknown = sorted(set(options) - {"--digest", "--leash"})
    if unknown or len(options) != len(rest) // 2:
        raise BadArguments(f"unknown or repeated option {(unknown or rest[::2])[0]}")
    if "--digest" not in options:
        raise BadArguments("--digest is missing")
    if not run_dir.is_dir():
        raise BadArguments(f"{run_dir} is not a run directory")
    leash = options.get("--leash")
    return run_dir, options["--digest"], None if leash is None else _leash_fd(leash)


def _leash_fd(text: str) -> int:
    """The leash's read end: a descriptor this process holds, and a pipe (leash.tie)."""
    if not text.isascii() or not text.isdigit():
        raise BadArguments(f"--leash {text!r} is not a file descriptor")
    fd = int(text)
    try:
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except (OSError, OverflowError):
        is_pipe = False
    if not is_pipe:
        raise BadArguments(f"--leash {fd} is not an open pipe")
    return fd


def main(argv: Sequence[str] | None = None) -> int:
    """0 when the run SUCCEEDED, 1 when it did not, 2 (and one line) for a bad command line."""
    try:
        run_dir, request_digest, leash_fd = arguments(sys.argv[1:] if argv is None else argv)
    except BadArguments as err:
        print(f"supervisor: {err}; {USAGE}", file=sys.stderr)
        return 2
    status = supervise(run_dir, request_digest, leash_fd)
    return 0 if status.state is JobState.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
