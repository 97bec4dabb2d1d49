"""LocalBackend: runs a job with torchrun on this machine, in its run directory.

submit starts runner.backends.local.supervisor (see there for the process design); status
reads the state.json it writes; logs read logs/rank-N.log; fetch checks the run directory
is complete (the results are already in place); cancel signals the supervisor and waits for
it to record CANCELLED.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil

from contract.rundir import JobState, JobStatus
from runner.errors import BackendUnavailable, RunnerError
from runner.job.spec import JobSpec
from runner.results import rundir

SCHEME = "local://"
SUPERVISOR_FILE = "supervisor.json"  # local runs only: the supervisor's pid, for cancel/status
CANCEL_TIMEOUT_S = 60.0
FOLLOW_POLL_S = 0.25


class LocalBackend:
    name = "local"
    poll_s = 0.05  # status() reads state.json and checks one pid: cheap enough to poll often

    def __init__(self, results_root: Path) -> None:
        self.results_root = results_root

    def submit(self, spec: JobSpec, run_dir: Path) -> str:
        if importlib.util.find_spec("torch") is None:
            raise BackendUnavailable(
                "the local backend needs torch in this environment: "
                "pip install -c constraints.txt -e '.[workloads]' (or run `make demo`)"
            )
        # PENDING before the supervisor exists, so its RUNNING can never be overwritten.
        rundir.write_state(run_dir, JobStatus(JobState.PENDING, "starting torchrun", _now()))
        with open(run_dir / rundir.LOGS / "supervisor.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "runner.backends.local.supervisor", str(run_dir.resolve())],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        started = psutil.Process(proc.pid).create_time()
        rundir.write_json(run_dir / SUPERVISOR_FILE, {"pid": proc.pid, "create_time": started})
        return SCHEME + spec.run_id

    def status(self, handle: str) -> JobStatus:
        run_dir = self._run_dir(handle)
        state = rundir.read_state(run_dir) or JobStatus(JobState.PENDING, "not started")
        if not state.state.finished and not self._supervisor_alive(run_dir):
            # Re-read: the supervisor may have finished between the two reads.
            state = rundir.read_state(run_dir) or state
            if not state.state.finished:
                return JobStatus(
                    JobState.FAILED,
                    "the local supervisor exited without recording an outcome; "
                    f"see {run_dir / rundir.LOGS / 'supervisor.log'}",
                    since=_now(),
                )
        return state

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        run_dir = self._run_dir(handle)
        world_size = rundir.read_record(run_dir).spec.placement.world_size
        if not 0 <= rank < world_size:
            raise RunnerError(f"rank {rank} does not exist; this run has ranks 0-{world_size - 1}")
        path = rundir.rank_log(run_dir, rank)
        yield from follow_lines(path, lambda: self.status(handle).state.finished, follow)

    def fetch(self, handle: str, dest: Path) -> list[str]:
        run_dir = self._run_dir(handle)
        if dest.resolve() != run_dir.resolve():
            raise RunnerError(f"a local run's results stay in {run_dir}; nothing to copy")
        spec = rundir.read_record(run_dir).spec
        return rundir.missing_results(run_dir, spec.placement.world_size)

    def cancel(self, handle: str) -> None:
        run_dir = self._run_dir(handle)
        if self.status(handle).state.finished:
            return
        supervisor = self._supervisor(run_dir)
        if supervisor is not None:
            supervisor.terminate()  # the supervisor stops torchrun and records CANCELLED
            try:
                supervisor.wait(timeout=CANCEL_TIMEOUT_S)
            except psutil.TimeoutExpired:
                supervisor.kill()
        state = rundir.read_state(run_dir)
        if state is None or not state.state.finished:
            rundir.write_state(
                run_dir, JobStatus(JobState.CANCELLED, "cancelled by the user", _now())
            )

    # ---- internals ----------------------------------------------------------------------

    def _run_dir(self, handle: str) -> Path:
        if not handle.startswith(SCHEME):
            raise RunnerError(f"not a local run handle: {handle!r}")
        return rundir.find(self.results_root, handle[len(SCHEME) :])

    def _supervisor(self, run_dir: Path) -> psutil.Process | None:
        info = rundir.read_json_or_none(run_dir / SUPERVISOR_FILE)
        if not info:
            return None
        try:
            proc = psutil.Process(info["pid"])
        except psutil.NoSuchProcess:
            return None
        # The same process, not a recycled pid; a zombie has finished its work.
        if abs(proc.create_time() - info["create_time"]) > 1e-3:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc

    def _supervisor_alive(self, run_dir: Path) -> bool:
        return self._supervisor(run_dir) is not None


def follow_lines(path: Path, finished, follow: bool) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Lines of a growing file; with follow, until `finished()` and the file is drained."""
    offset = 0
    partial = ""
    while True:
        done = finished() if follow else True  # read the flag before draining: no lost tail
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
        except FileNotFoundError:
            chunk = ""
        lines = (partial + chunk).split("\n")
        partial = lines.pop()
        yield from lines
        if done:
            if partial:
                yield partial
            return
        time.sleep(FOLLOW_POLL_S)


def _now() -> str:
    return datetime.now(UTC).isoformat()
