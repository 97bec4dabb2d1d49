"""The runner's API: what the CLI does, as functions that return values and never print.

Every command goes through here, so a notebook or a sweep script can do what the CLI does.
Backends are chosen by a run's handle scheme; the run directory is the only state.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.rundir import JobState, JobStatus
from runner.backends.base import Backend
from runner.errors import RunnerError
from runner.job.spec import JobSpec
from runner.results import rundir
from workloads.mllog import parse_line

if TYPE_CHECKING:
    from workloads.compliance import CheckResult

log = logging.getLogger(__name__)
WAIT_POLL_S = 0.25


@dataclass(frozen=True)
class Run:
    """A submitted run: where its files are and how its backend knows it."""

    run_dir: Path
    record: rundir.RunRecord

    @property
    def handle(self) -> str:
        return self.record.handle

    @property
    def run_id(self) -> str:
        return self.record.spec.run_id


@dataclass(frozen=True)
class RunInfo:
    run: Run
    status: JobStatus
    summary: dict[str, Any] | None


def backend_for(handle: str, results_root: Path) -> Backend:
    scheme = handle.partition("://")[0]
    if scheme == "local":
        from runner.backends.local.backend import LocalBackend

        return LocalBackend(results_root)
    if scheme == "k8s":
        from runner.backends.kubernetes.backend import from_handle

        return from_handle(handle, results_root)  # reconnects from job.json's `cluster`
    raise RunnerError(f"no backend for handle {handle!r}")


def submit(spec: JobSpec, backend: Backend, results_root: Path, backend_name: str) -> Run:
    """Create the run directory (job.json first), then hand the job to the backend."""
    cluster = getattr(backend, "reference", None)  # how to reconnect, for remote backends
    placeholder = rundir.RunRecord(spec, backend_name, handle="", cluster=cluster)
    run_dir = rundir.create(results_root, placeholder)
    try:
        handle = backend.submit(spec, run_dir)
    except BaseException as err:
        rundir.write_state(run_dir, JobStatus(JobState.FAILED, f"submit failed: {err}"))
        raise
    record = rundir.RunRecord(spec, backend_name, handle, cluster=cluster)
    rundir.write_json(run_dir / rundir.JOB, record.to_dict())
    log.info("submitted %s as %s", spec.run_id, handle)
    return Run(run_dir, record)


def open_run(results_root: Path, run_id: str) -> Run:
    run_dir = rundir.find(results_root, run_id)
    return Run(run_dir, rundir.read_record(run_dir))


def check(results_root: Path, run: Run) -> CheckResult:
    """The MLPerf compliance check of a run's event log (workloads.compliance)."""
    from workloads import compliance

    events = run.run_dir / rundir.EVENTS
    if not events.is_file():
        raise RunnerError(
            f"{run.run_id} has no {rundir.EVENTS}; bring its results home first: "
            f"runner fetch {run.run_id}"
        )
    try:
        return compliance.check_log(events, run.record.spec.benchmark)
    except (compliance.CheckerUnavailable, compliance.UnknownBenchmark) as err:
        raise RunnerError(str(err)) from None


def status(results_root: Path, run: Run) -> JobStatus:
    return backend_for(run.handle, results_root).status(run.handle)


def wait(
    results_root: Path,
    run: Run,
    on_event: Callable[[dict[str, Any]], None] = lambda event: None,
    on_status: Callable[[JobStatus], None] = lambda status: None,
) -> JobStatus:
    """Follow a run until it ends, passing each new event and status change along."""
    backend = backend_for(run.handle, results_root)
    events = event_source(run, backend)
    last: JobStatus | None = None
    while True:
        current = backend.status(run.handle)
        for event in events.read_new():
            on_event(event)
        if current != last:
            on_status(current)
            last = current
        if current.state.finished:
            for event in events.read_new():
                on_event(event)
            return current
        # A backend whose status is a cheap local read polls faster (the local one: a run's
        # end shows within 0.05 s); the default spares a cluster's API server.
        time.sleep(getattr(backend, "poll_s", WAIT_POLL_S))


def logs(results_root: Path, run: Run, rank: int, follow: bool) -> Iterator[str]:
    return backend_for(run.handle, results_root).logs(run.handle, rank, follow)


def fetch(results_root: Path, run: Run) -> list[str]:
    """Bring results into the run directory; returns what is still missing (empty: complete)."""
    backend = backend_for(run.handle, results_root)
    state = backend.status(run.handle)
    if not state.state.finished:
        raise RunnerError(
            f"{run.run_id} is {state.state.value}; wait for it (`runner logs {run.run_id} "
            "--follow`) or cancel it (`runner cancel`) before fetching"
        )
    return backend.fetch(run.handle, run.run_dir)


def cancel(results_root: Path, run: Run) -> JobStatus:
    backend = backend_for(run.handle, results_root)
    backend.cancel(run.handle)
    return backend.status(run.handle)


def list_runs(results_root: Path) -> list[RunInfo]:
    infos = []
    for run_dir in rundir.list_dirs(results_root):
        record = rundir.read_record(run_dir)
        run = Run(run_dir, record)
        try:
            state = status(results_root, run)
        except RunnerError as err:
            state = JobStatus(JobState.FAILED, str(err))
        infos.append(RunInfo(run, state, rundir.read_summary(run_dir)))
    return infos


def event_source(run: Run, backend: Backend) -> EventTail | LogEvents:
    """Where a running job's events appear: the run directory's events.jsonl for a local run,
    rank 0's log for a remote one (its events.jsonl is only complete after fetch)."""
    if run.handle.startswith("local://"):
        return EventTail(run.run_dir / rundir.EVENTS)
    return LogEvents(backend.logs(run.handle, 0, True))


class LogEvents:
    """Events parsed from a followed log, read on a thread so that waiting for pods never
    blocks status polling (which reports why a job is pending)."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._pump, args=(lines,), daemon=True)
        self._thread.start()

    def _pump(self, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                event = parse_line(line)
                if event is not None:
                    self._queue.put(event)
        except RunnerError as err:  # the job went away; status() reports why
            log.warning("stopped following logs: %s", err)

    def read_new(self) -> list[dict[str, Any]]:
        events = []
        while not self._queue.empty():
            events.append(self._queue.get())
        return events


class EventTail:
    """New complete events appended to an events.jsonl since the last read."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # only whole lines; a line being written waits
        self._offset += end
        text = data[:end].decode("utf-8", errors="replace")
        return [e for e in map(parse_line, text.splitlines()) if e is not None]
