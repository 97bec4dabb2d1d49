"""Supervises one local run: starts torchrun, records the outcome, leaves no process behind.

Started by LocalBackend.submit as `python -m runner.backends.local.supervisor RUN_DIR` in a
session of its own, so the run survives the CLI that started it (`--detach`) and a Ctrl-C in
that terminal reaches only the CLI, which then cancels through this process. It is the only
writer of state.json. SIGTERM or SIGINT cancels: torchrun and every worker get SIGTERM, and
whatever is left after a grace period gets SIGKILL. torchrun starts each worker in a session
of its own, so cleanup walks the process tree rather than signalling a process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psutil

from contract.rundir import JobState, JobStatus
from runner.job.spec import JobSpec, workload_args, workload_module
from runner.results import rundir

POLL_S = 0.2
GRACE_S = 10.0
LAUNCHER_LOG = "launcher.log"


def torchrun_argv(spec: JobSpec, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "runner.backends.local.torchrun",
        "--standalone",
        f"--nproc-per-node={spec.placement.procs_per_node}",
        "--monitor-interval=0.1",  # how soon torchrun sees its workers are done
        "-m", workload_module(spec),
        *workload_args(spec, output_dir=str(run_dir), log_dir=str(run_dir / rundir.LOGS)),
    ]  # fmt: skip


def worker_env(spec: JobSpec) -> dict[str, str]:
    env = dict(os.environ)
    # One process per core share: torchrun would otherwise force 1 thread and warn about it.
    threads = max(1, (os.cpu_count() or 1) // spec.placement.procs_per_node)
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def supervise(run_dir: Path) -> JobStatus:
    run_dir = run_dir.resolve()  # torchrun runs inside it; relative paths would nest
    spec = rundir.read_record(run_dir).spec
    cancelled = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal cancelled
        cancelled = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with open(run_dir / rundir.LOGS / LAUNCHER_LOG, "ab") as launcher_log:
        proc = subprocess.Popen(
            torchrun_argv(spec, run_dir), stdout=launcher_log, stderr=subprocess.STDOUT,
            env=worker_env(spec), cwd=run_dir,
        )  # fmt: skip
        rundir.write_state(run_dir, JobStatus(JobState.RUNNING, since=_now()))
        tree = ProcessTree(proc.pid)
        while proc.poll() is None and not cancelled:
            tree.refresh()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=POLL_S)  # returns as soon as torchrun exits
        tree.terminate(GRACE_S)
        proc.wait()
    status = outcome(run_dir, spec, proc.returncode, cancelled)
    rundir.write_state(run_dir, status)
    return status


def outcome(run_dir: Path, spec: JobSpec, returncode: int, cancelled: bool) -> JobStatus:
    if cancelled:
        return JobStatus(JobState.CANCELLED, "cancelled by the user", since=_now())
    if returncode == 0 and (run_dir / rundir.SUMMARY).is_file():
        return JobStatus(JobState.SUCCEEDED, since=_now())
    launcher_text = (run_dir / rundir.LOGS / LAUNCHER_LOG).read_text(errors="replace")
    rank, code = parse_root_cause(launcher_text)
    if rank is None:
        reason = f"torchrun exited with code {returncode}; see logs/{LAUNCHER_LOG}"
        return JobStatus(JobState.FAILED, reason, since=_now(), exit_code=returncode)
    reason = f"rank {rank} exited with code {code}{_signal_note(code)}"
    last = last_error_line(rundir.rank_log(run_dir, rank))
    if last:
        reason += f": {last}"
    return JobStatus(JobState.FAILED, reason, since=_now(), failed_rank=rank, exit_code=code)


def parse_root_cause(launcher_text: str) -> tuple[int | None, int | None]:
    """The first failed rank and its exit code, from torchrun's ChildFailedError report."""
    section = launcher_text.rpartition("Root Cause")[2]
    rank = re.search(r"^\s*rank\s*:\s*(\d+)", section, re.MULTILINE)
    code = re.search(r"^\s*exitcode\s*:\s*(-?\d+)", section, re.MULTILINE)
    if not (rank and code):
        return None, None
    return int(rank.group(1)), int(code.group(1))


def last_error_line(log: Path) -> str:
    """The exception line at the end of a rank's log, if it ended with one."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines[-20:]):
        if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line):
            return line[:300]
    return ""


class ProcessTree:
    """A process and every descendant ever seen under it.

    Remembering descendants matters: if torchrun itself dies, its workers are re-parented
    and no longer appear under it, yet they must not outlive the run. psutil.Process checks
    creation time, so a recycled pid is never signalled by mistake.
    """

    def __init__(self, pid: int) -> None:
        self._known: dict[int, psutil.Process] = {}
        try:
            self._root = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._root = None
        self.refresh()

    def refresh(self) -> None:
        if self._root is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended: keep what was seen
            for p in [self._root, *self._root.children(recursive=True)]:
                self._known.setdefault(p.pid, p)

    def terminate(self, grace_s: float) -> None:
        """SIGTERM all, then SIGKILL whatever outlives grace_s."""
        self.refresh()
        procs = [p for p in self._known.values() if p.is_running()]
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(alive, timeout=grace_s)


def _signal_note(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f" (killed by {signal.Signals(-code).name})"
        except ValueError:
            return ""
    return ""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def main() -> int:
    status = supervise(Path(sys.argv[1]))
    return 0 if status.state is JobState.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
