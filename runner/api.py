"""The runner's API: what the CLI does, as functions that return values and never print.

Every command goes through here, so a notebook or a sweep does what the CLI does. One
lifecycle for every backend (runner/backends/base.py): the request is made and checked before
anything exists; job.json, with the run's handle, is written before anything starts, so a run
always has a record, a failed submit included; then the run is followed, its results fetched,
and an interrupt cancels it. Nothing here asks which backend a run has: its record says.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.files import DamagedFile
from contract.rundir import EVENTS, JOB, JobState, JobStatus, read_state
from contract.summary import Summary
from runner.backends import factory
from runner.backends.base import Backend
from runner.errors import RunInputError, RunnerError, interruption
from runner.job.spec import JobSpec
from runner.results import rundir

if TYPE_CHECKING:
    from workloads.compliance import CheckResult

log = logging.getLogger(__name__)
FOLLOW_POLL_S = 0.25

Event = dict[str, Any]


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
    """One row of `runner runs`: a run, or a damaged run directory and what is wrong with it."""

    run_dir: Path
    run: Run | None
    status: JobStatus | None
    summary: Summary | None
    damage: str | None = None  # "job.json: is not valid JSON (...)": the run is DAMAGED
    summary_damage: str | None = None  # the run is fine, its summary.json is not


@dataclass
class Callbacks:
    """What a caller hears while a run goes: its submission, its events, its status changes."""

    on_submitted: Callable[[Run], None] = lambda run: None
    on_event: Callable[[Event], None] = lambda event: None
    on_status: Callable[[JobStatus], None] = lambda status: None


@dataclass(frozen=True)
class Outcome:
    run: Run
    status: JobStatus
    missing: tuple[str, ...] = field(default=())  # results a complete run has and this lacks


def backend_for(
    run: Run, results_root: Path, fetch_caps_mib: tuple[int, int] | None = None
) -> Backend:
    """The backend that ran `run`, rebuilt from its record (job.json); `fetch_caps_mib` (per
    file, per run) raises what a cluster fetch may copy from its results store."""
    return factory.for_record(run.record, results_root, fetch_caps_mib)


def release(results_root: Path, run: Run) -> None:
    """Let the run go on after this process ends (runner.backends.base.Backend.release)."""
    backend = backend_for(run, results_root)
    try:
        backend.release(run.handle)
    finally:
        backend.close()


def dryrun(spec: JobSpec, backend: Backend, results_root: Path) -> str:
    """What submit would run, as a person reads it; nothing is created or started."""
    return backend.describe(backend.dryrun(spec, results_root / spec.run_id))


def submit(spec: JobSpec, backend: Backend, results_root: Path, detach: bool = False) -> Run:
    """Check the request, write job.json with its handle, then start it. A submission that
    fails after that point is a FAILED run with the reason, never a run without a record.
    A local run is cancelled if this process ends before `follow_to_end` has followed it to
    its end, a SIGKILL included (Backend.release); `detach` lets it go on alone."""
    request = backend.dryrun(spec, results_root / spec.run_id)
    record = rundir.RunRecord(spec, backend.name, backend.handle(request), backend.reference)
    run_dir = rundir.create(results_root, record)
    run = Run(run_dir, record)
    try:
        rundir.write_state(run_dir, JobStatus(JobState.PENDING, "submitting", _now()))
        backend.submit(request)
    except BaseException as err:
        reason = "interrupted while submitting" if _interrupt(err) else f"submit failed: {err}"
        with contextlib.suppress(OSError):
            rundir.write_state(run_dir, JobStatus(JobState.FAILED, reason, _now()))
        if isinstance(err, OSError):
            raise rundir.storage_error(err, run_dir) from None
        raise
    if detach:
        backend.release(record.handle)
    log.info("submitted %s as %s", spec.run_id, record.handle)
    return run


def run_to_end(
    spec: JobSpec, backend: Backend, results_root: Path, callbacks: Callbacks | None = None
) -> Outcome:
    """Submit, follow to the end and fetch: the one path `submit` and `sweep` share. Ctrl-C,
    SIGTERM or SIGHUP (runner.errors.Interrupted) cancel the run, then propagate."""
    cb = callbacks or Callbacks()
    run = submit(spec, backend, results_root)
    cb.on_submitted(run)
    return follow_to_end(results_root, run, cb)


def follow_to_end(results_root: Path, run: Run, callbacks: Callbacks | None = None) -> Outcome:
    """Follow a submitted run until it ends, then fetch its results; an interrupt cancels."""
    cb = callbacks or Callbacks()
    try:
        status = follow(results_root, run, cb.on_event, cb.on_status)
    except BaseException as err:
        stop = interruption(err)
        if stop is None:  # failing to follow it, with an error that says so: it goes on
            release(results_root, run)
            raise
        # Released only once cancelled: a cancel cut short (a second Ctrl-C) keeps the leash,
        # so the run still ends when this process does, never left running unwatched.
        cancel(results_root, run)
        release(results_root, run)
        if stop is err:
            raise
        raise stop from err  # unwrapped, so that every caller sees the interrupt it is
    release(results_root, run)  # followed to its end
    try:
        missing = fetch(results_root, run)
    except RunnerError as err:
        missing = [str(err)]
    return Outcome(run, _recorded(run, status), tuple(missing))


def _recorded(run: Run, followed: JobStatus) -> JobStatus:
    """The run's final state as fetching left it recorded: a fetch judges the results too (a
    cluster job that reports success while its summary says diverged is a FAILED run), and
    the outcome must say what the record says; the followed status where none is readable."""
    try:
        recorded = read_state(run.run_dir)
    except DamagedFile:
        return followed
    return recorded if recorded is not None and recorded.state.finished else followed


def follow(
    results_root: Path,
    run: Run,
    on_event: Callable[[Event], None] = lambda event: None,
    on_status: Callable[[JobStatus], None] = lambda status: None,
) -> JobStatus:
    """Pass each new event and status change along until the run ends; the final status."""
    backend = backend_for(run, results_root)
    try:
        return _follow(backend, run.handle, on_event, on_status)
    finally:
        backend.close()


def _follow(
    backend: Backend,
    handle: str,
    on_event: Callable[[Event], None],
    on_status: Callable[[JobStatus], None],
) -> JobStatus:
    # The watch blocks between changes (a Kubernetes watch holds a connection), so it runs on
    # a thread of its own while this one passes events along.
    statuses: queue.SimpleQueue[JobStatus | BaseException] = queue.SimpleQueue()

    def pump() -> None:
        try:
            for status in backend.watch(handle):
                statuses.put(status)
        except BaseException as err:  # handed to the caller's thread, raised there
            statuses.put(err)

    threading.Thread(target=pump, name="watch", daemon=True).start()
    events = backend.events(handle)
    while True:
        final = _drain(statuses, on_status)
        for event in next(events, []):
            on_event(event)
        if final is not None:
            for event in next(events, []):  # what was written just before the end
                on_event(event)
            return final


def _drain(
    statuses: queue.SimpleQueue[JobStatus | BaseException],
    on_status: Callable[[JobStatus], None],
) -> JobStatus | None:
    """The statuses that arrived, waiting up to FOLLOW_POLL_S for one: a run's end is passed
    on the moment the watch sees it, events at least every FOLLOW_POLL_S."""
    final = None
    try:
        item = statuses.get(timeout=FOLLOW_POLL_S)
    except queue.Empty:
        return None
    while True:
        if isinstance(item, BaseException):
            raise item
        on_status(item)
        if item.state.finished:
            final = item
        try:
            item = statuses.get_nowait()
        except queue.Empty:
            return final


def wait(results_root: Path, run: Run) -> JobStatus:
    """Block until the run ends; its final status."""
    return follow(results_root, run)


def open_run(results_root: Path, run_id: str) -> Run:
    run_dir = rundir.find(results_root, run_id)
    return Run(run_dir, _record(run_dir))


def status(results_root: Path, run: Run) -> JobStatus:
    backend = backend_for(run, results_root)
    try:
        return backend.status(run.handle)
    finally:
        backend.close()


def logs(results_root: Path, run: Run, rank: int, follow: bool) -> Iterator[str]:
    backend = backend_for(run, results_root)
    try:
        yield from backend.logs(run.handle, rank, follow)
    finally:
        backend.close()


def fetch(results_root: Path, run: Run, caps_mib: tuple[int, int] | None = None) -> list[str]:
    """Bring results into the run directory; returns what is still missing (empty: complete).
    `caps_mib`: the largest file and run a cluster fetch copies (default 128 and 256 MiB)."""
    backend = backend_for(run, results_root, caps_mib)
    try:
        state = backend.status(run.handle)
        if not state.state.finished:
            raise RunnerError(
                f"{run.run_id} is {state.state.value}; wait for it (`runner logs {run.run_id} "
                "--follow`) or cancel it (`runner cancel`) before fetching"
            )
        return backend.fetch(run.handle, run.run_dir)
    except OSError as err:  # the run directory refuses a write: a full disk, a planted link
        raise rundir.storage_error(err, run.run_dir) from None
    finally:
        backend.close()


def cancel(results_root: Path, run: Run) -> JobStatus:
    backend = backend_for(run, results_root)
    try:
        backend.cancel(run.handle)
        return backend.status(run.handle)
    finally:
        backend.close()


def join(results_root: Path, run: Run) -> str:
    """One more worker in a running elastic run (`runner join`); what started, in a line."""
    placement = run.record.spec.placement
    if placement.min_workers is None:
        raise RunInputError(
            f"{run.run_id} is not elastic; only a run submitted with --workers MIN:MAX takes "
            "a joining worker"
        )
    backend = backend_for(run, results_root)
    try:
        return backend.join(run.handle)
    finally:
        backend.close()


def check(results_root: Path, run: Run) -> CheckResult:
    """The MLPerf compliance check of a run's event log (workloads.compliance)."""
    from workloads import compliance

    events = run.run_dir / EVENTS
    if not events.is_file():
        backend = backend_for(run, results_root)
        backend.close()
        if not backend.fetches_results:  # nothing to fetch: the run never logged an event
            raise RunnerError(
                f"{run.run_id} has no {EVENTS}: it ended before its first event (cancelled, or "
                f"failed at start: `runner status {run.run_id}` says why)"
            )
        raise RunnerError(
            f"{run.run_id} has no {EVENTS}; bring its results home first: runner fetch {run.run_id}"
        )
    try:
        return compliance.check_log(events, run.record.spec.benchmark)
    except (compliance.CheckerUnavailable, compliance.UnknownBenchmark) as err:
        raise RunnerError(str(err)) from None


def list_runs(results_root: Path) -> list[RunInfo]:
    """Every run directory, newest first. A damaged one is listed with what is wrong and never
    stops the others. Local runs are asked for their state (cheap, and it notices a dead
    supervisor); cluster runs show their last recorded state (`runner status RUN` asks the
    cluster), so listing never waits on a network."""
    return [_info(results_root, run_dir) for run_dir in rundir.list_dirs(results_root)]


def run_info(results_root: Path, run_dir: Path) -> RunInfo:
    """One run directory's entry of list_runs (`runner runs` builds its rows one at a time,
    only for runs whose records changed: runner/cli/listing.py)."""
    return _info(results_root, run_dir)


def _info(results_root: Path, run_dir: Path) -> RunInfo:
    try:
        run = Run(run_dir, _record(run_dir))
        state = factory.listed_status(run.record, results_root)
    except DamagedFile as err:
        return RunInfo(run_dir, None, None, None, damage=f"{err.path.name}: {err.problem}")
    except RunnerError as err:  # no such run, or job.json names no cluster this runner reaches
        return RunInfo(run_dir, None, None, None, damage=str(err))
    try:
        return RunInfo(run_dir, run, state, rundir.read_summary(run_dir))
    except DamagedFile as err:
        return RunInfo(run_dir, run, state, None, summary_damage=f"{err.path.name}: {err.problem}")


def _record(run_dir: Path) -> rundir.RunRecord:
    """job.json, only if it is this directory's: a copied or renamed run directory keeps the
    original's record, and its handle would reach the original run (cancel it, report its
    state) rather than this one."""
    record = rundir.read_record(run_dir)
    path = run_dir / JOB
    if record.spec.run_id != run_dir.name:
        raise DamagedFile(
            path, f"names run {record.spec.run_id!r}, not its directory (copied or renamed?)"
        )
    if not factory.handle_names(record, run_dir.name):
        raise DamagedFile(path, f"has the handle {record.handle!r}, not this run's")
    return record


def _interrupt(err: BaseException) -> bool:
    return interruption(err) is not None


def _now() -> str:
    return datetime.now(UTC).isoformat()
