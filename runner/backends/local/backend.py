"""LocalBackend: runs a job on this machine, one process per rank, in its run directory.

dryrun checks what a run here needs (runner/backends/local/preflight.py) and returns the exact
request: the command lines, the variables they add to the environment and where they run.
submit records that request (launch.json) and starts the supervisor
(runner/backends/local/supervisor.py), which runs exactly it and is the only writer of
state.json while it lives. status reads state.json and notices a supervisor that died without
recording an outcome: that run is marked FAILED and whatever is left of it is ended. cancel
signals only a process that proves it belongs to the run (runner/backends/local/processes.py).
Events and logs read the run's growing files (runner/backends/local/tail.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from contract import files
from contract.files import DamagedFile
from contract.rundir import EVENTS, LOGS, STATE, JobState, JobStatus, rank_log, read_state
from runner import flock
from runner.backends.base import LOCAL_SCHEME, LocalRequest, Process, Request
from runner.backends.local import (
    elastic,
    joins,
    launch,
    leash,
    network,
    network_check,
    preflight,
    processes,
)
from runner.backends.local.supervisor import command as supervisor_command
from runner.backends.local.tail import EventTail, follow_lines
from runner.errors import RunInputError, RunnerError, RunNotFound, SpecError
from runner.job.link import parse_link
from runner.job.spec import JobSpec
from runner.results import rundir

SCHEME = LOCAL_SCHEME
SUPERVISOR_FILE = "supervisor.json"  # the supervisor's pid and start time (never trusted alone)
SUPERVISOR_LOG = "supervisor.log"
CANCEL_TIMEOUT_S = 60.0
LEFTOVER_GRACE_S = 5.0
START_LOCK_WAIT_S = 1.0  # job.json to the start lock is microseconds; this is for a busy machine
STARTING_S = 10.0  # the supervisor is on record milliseconds after it starts; a busy machine
JOIN_ANSWER_S = 10.0  # the supervisor answers within a poll; this is for a busy machine
# status() reads state.json and checks one process: cheap enough to poll often, so that a run's
# end shows within 0.05 s (`runner submit` returns right after the run, not seconds later).
POLL_S = 0.05


class LocalBackend:
    name = "local"
    reference = None
    fetches_results = False

    def __init__(self, results_root: Path) -> None:
        self.results_root = results_root

    # ---- the request -------------------------------------------------------------------

    def dryrun(self, spec: JobSpec, run_dir: Path) -> LocalRequest:
        preflight.check(spec)
        run_dir = run_dir.absolute()
        if spec.placement.min_workers is not None:
            port = launch.free_port()
            return LocalRequest(
                str(run_dir), elastic.elastic_processes(spec, run_dir, port), None, port,
                spec.placement.min_workers,
            )  # fmt: skip
        if spec.placement.link is None:
            return LocalRequest(str(run_dir), rank_processes(spec, run_dir))
        return LocalRequest(str(run_dir), shaped_processes(spec, run_dir), spec.placement.link)

    def describe(self, request: Request) -> str:
        local = _local(request)
        lines = []
        if local.store_port is not None:
            lines.append(
                f"# the supervisor hosts the workers' store on {launch.LOOPBACK}:"
                f"{local.store_port}; the run goes on while {local.min_workers} are left "
                "(each worker is also given the run's secret, in its environment only)"
            )
        for p in local.processes:
            if p.netns is not None:
                lines.append(f"# in worker namespace {p.netns}, on its own {local.link} link:")
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(p.env.items()))
            lines.append(f"cd {shlex.quote(p.cwd)} && env {env} {shlex.join(p.argv)}")
        return "\n".join(lines)

    def handle(self, request: Request) -> str:
        return SCHEME + Path(_local(request).run_dir).name

    def submit(self, request: Request) -> str:
        local = _local(request)
        run_dir = Path(local.run_dir)
        env = {**os.environ, **processes.run_env(run_dir.name, run_dir), "PYTHONUNBUFFERED": "1"}
        # The start lock, held until the supervisor is on record and then by the supervisor
        # (its stdout): until then, `status` from another command waits rather than taking a
        # run being started for one whose supervisor died.
        with flock.hold(run_dir / LOGS / SUPERVISOR_LOG) as out:
            # The supervisor runs these bytes only (their digest on its argv): a launch.json
            # rewritten before it reads it fails the run rather than runs another command.
            request_bytes = files.json_bytes(local.to_dict())
            files.write_bytes(run_dir / launch.LAUNCH_FILE, request_bytes)
            # Tied to this process until the command lets the run go (leash.py).
            read_end = leash.tie(run_dir)
            proc = None
            try:
                try:
                    proc = subprocess.Popen(
                        supervisor_command(run_dir, launch.digest(request_bytes), read_end),
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                        start_new_session=True,  # a Ctrl-C in the terminal reaches the runner alone
                        pass_fds=(read_end,),
                    )  # fmt: skip
                finally:
                    os.close(read_end)  # the supervisor's alone now
                started = psutil.Process(proc.pid).create_time()
                files.write_json(
                    run_dir / SUPERVISOR_FILE, {"pid": proc.pid, "create_time": started}
                )
            # A submit that fails (a full disk here, Ctrl-C) leaves nothing running, not a run
            # going on behind its error; the supervisor's workers die with it.
            except BaseException:
                if proc is not None:
                    proc.kill()
                    proc.wait()
                leash.release(run_dir)
                raise
        return self.handle(request)

    # ---- following ---------------------------------------------------------------------

    def status(self, handle: str) -> JobStatus:
        run_dir = self._run_dir(handle)
        state = read_state(run_dir) or JobStatus(JobState.PENDING, "not started")
        if state.state.finished or self._supervisor(run_dir) is not None:
            return state
        # Re-read: the supervisor may have recorded its outcome between the two reads.
        state = read_state(run_dir) or state
        if state.state.finished or self._starting(run_dir):
            return state
        return self._supervisor_died(run_dir, state)

    def listed_status(self, handle: str) -> JobStatus:
        return self.status(handle)

    def watch(self, handle: str) -> Iterator[JobStatus]:
        # The supervisor is proven once (its pid file, creation time and membership: psutil
        # reads several /proc files) and then only asked whether it still runs. Proving it at
        # every poll cost the follower about 15 ms of CPU a second, taken from the workers on
        # a machine they fill (bench/fair_scaling.py); torchrun's own agent takes ~2.5.
        run_dir, last, supervisor = self._run_dir(handle), None, None
        while True:
            if supervisor is not None and _running(supervisor):
                current = read_state(run_dir) or JobStatus(JobState.PENDING, "not started")
            else:
                current = self.status(handle)
                supervisor = None if current.state.finished else self._supervisor(run_dir)
            if current != last:
                yield current
                last = current
            if current.state.finished:
                return
            time.sleep(POLL_S)

    def events(self, handle: str) -> Iterator[list[dict[str, Any]]]:
        tail = EventTail(self._run_dir(handle) / EVENTS)
        while True:
            yield tail.read_new()

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        run_dir = self._run_dir(handle)
        placement = rundir.read_record(run_dir).spec.placement
        world_size = placement.world_size
        # An elastic run's joiners are workers MAX, MAX+1, ... with their own logs.
        joined = placement.min_workers is not None and rank_log(run_dir, rank).is_file()
        if not (0 <= rank < world_size or (rank >= 0 and joined)):
            raise RunInputError(
                f"rank {rank} does not exist; this run has ranks 0-{world_size - 1}"
            )
        path = rank_log(run_dir, rank)
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
        supervisor = self._supervisor(run_dir) or self._await_supervisor(run_dir)
        if supervisor is not None:
            supervisor.terminate()  # it stops the ranks and records CANCELLED
            try:
                supervisor.wait(timeout=CANCEL_TIMEOUT_S)
            except psutil.TimeoutExpired:
                supervisor.kill()
        processes.end(processes.members(run_dir.name, run_dir), LEFTOVER_GRACE_S)
        state = read_state(run_dir)
        if state is None or not state.state.finished:
            cancelled = JobStatus(JobState.CANCELLED, "cancelled by the user", _now())
            rundir.write_state(run_dir, cancelled)

    def join(self, handle: str) -> str:
        run_dir = self._run_dir(handle)
        state = self.status(handle)
        if state.state is not JobState.RUNNING:
            raise RunnerError(
                f"{run_dir.name} is {state.state.value}, not running; only a running elastic "
                "run takes a joining worker"
            )
        return joins.ask(run_dir, JOIN_ANSWER_S)

    def release(self, handle: str) -> None:
        # Never raises: a run whose directory is gone still lets go of its leash.
        leash.release(self.results_root / handle.removeprefix(SCHEME))

    def close(self) -> None:
        return None

    # ---- internals ---------------------------------------------------------------------

    def _run_dir(self, handle: str) -> Path:
        """The directory the handle names, exactly: never a prefix's match, which could be
        another run (a handle is read from job.json, and job.json may be a copy's)."""
        run_id = handle.removeprefix(SCHEME)
        if run_id == handle or not run_id or "/" in run_id or run_id in (".", ".."):
            raise RunnerError(f"not a local run handle: {handle!r}")
        run_dir = self.results_root / run_id
        if run_dir.is_symlink() or not run_dir.is_dir():
            raise RunNotFound(f"no run {run_id!r} under {self.results_root}/")
        return run_dir

    def _supervisor(self, run_dir: Path) -> Any:
        """The live supervisor of the run, only if it proves it is one (never a bare pid)."""
        try:
            info = files.read_json_object(run_dir / SUPERVISOR_FILE)
        except (FileNotFoundError, DamagedFile):
            return None
        return processes.proven(info.get("pid"), info.get("create_time"), run_dir.name, run_dir)

    def _starting(self, run_dir: Path) -> bool:
        """Whether the run is being started (its starter or its supervisor holds the start
        lock). The lock appears a moment after job.json: a run without it is given that
        moment before its starter is taken for dead."""
        lock = run_dir / LOGS / SUPERVISOR_LOG
        deadline = time.monotonic() + START_LOCK_WAIT_S
        while not os.path.lexists(lock) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return flock.held(lock)

    def _await_supervisor(self, run_dir: Path) -> Any:
        """The supervisor of a run being started, once it is on record (a cancel that came
        first would otherwise be overwritten by the supervisor's RUNNING); None if the start
        ends without one."""
        deadline = time.monotonic() + STARTING_S
        while self._starting(run_dir) and time.monotonic() < deadline:
            supervisor = self._supervisor(run_dir)
            if supervisor is not None:
                return supervisor
            time.sleep(POLL_S)
        return self._supervisor(run_dir)

    def _supervisor_died(self, run_dir: Path, last: JobStatus) -> JobStatus:
        """The supervisor is gone without an outcome: end what is left, record FAILED."""
        leftovers = processes.members(run_dir.name, run_dir)
        processes.end(leftovers, LEFTOVER_GRACE_S)
        if (run_dir / SUPERVISOR_FILE).exists():
            reason = (
                f"the supervisor died (killed or crashed) while the run was {last.state.value}"
                f"; {len(leftovers)} leftover process(es) ended; see {LOGS}/{SUPERVISOR_LOG}"
            )
        else:
            reason = "the runner was stopped before the run started"
        return _record_inferred(run_dir, JobStatus(JobState.FAILED, reason, _now()))


def _record_inferred(run_dir: Path, status: JobStatus) -> JobStatus:
    """Record an outcome the runner inferred, or, where the disk refuses (a read-only copy of
    someone's results, a disk remounted read-only, a full one), still report it, saying it is
    not on record: reading a run must never fail for want of writing it."""
    try:
        rundir.write_state(run_dir, status)
    except OSError as err:
        why = err.strerror or type(err).__name__
        return replace(status, reason=f"{status.reason}; not recorded in {STATE}: {why}")
    return status


def rank_processes(spec: JobSpec, run_dir: Path) -> tuple[Process, ...]:
    """One process per rank on this machine's loopback, started directly with torchrun's
    variables (runner/backends/local/launch.py says why not under torchrun); rank 0 hosts
    the store on a port free now."""
    return launch.worker_processes(
        spec.placement.world_size, launch.workload_entry(spec, run_dir),
        launch.thread_env(spec.placement), str(run_dir),
        launch.free_port(),
    )  # fmt: skip


def shaped_processes(spec: JobSpec, run_dir: Path) -> tuple[Process, ...]:
    """One process per rank, each in the network namespace of its own that its shaped link
    reaches (runner/backends/local/launch.py)."""
    launch.check_placement(spec.placement.device)
    if spec.placement.world_size > network.MAX_WORKERS:  # else the supervisor fails to build it
        raise SpecError(
            "--workers",
            f"a shaped network has at most {network.MAX_WORKERS} workers (one address each on "
            f"its /24), not {spec.placement.world_size}",
        )
    network_check.require(parse_link(spec.placement.link or ""))  # dryrun: a spec with a link
    return launch.worker_processes(
        spec.placement.world_size, launch.workload_entry(spec, run_dir),
        launch.thread_env(spec.placement), str(run_dir),
        launch.SHAPED_MASTER_PORT, shaped=True,
    )  # fmt: skip


def _local(request: Request) -> LocalRequest:
    if not isinstance(request, LocalRequest):
        raise SpecError("--local", f"the local backend cannot run {type(request).__name__}")
    return request


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _running(process: psutil.Process) -> bool:
    """Whether a process proven once is still that process and not yet ended (psutil checks
    its creation time, so a recycled pid is not it; a zombie has ended)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
