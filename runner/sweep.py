"""Running a study: the grid's runs one after another through runner.api's one lifecycle.

Sequential on purpose: runs of a scaling study must not share the machine or the cluster, or
their times would measure each other. The study record is saved before the first run and after
every change, so a sweep stopped by Ctrl-C, SIGTERM or SIGHUP (the current run is cancelled and
recorded as such, the study marked partial) or by a failed submit still lists every run it
started with its final state, and still reports; a SIGKILLed one cancels its run too
(runner/backends/local/leash.py), and its study then reads as partial (study.SWEEP_LOCK). A
run that fails or misses the target is a data point: the sweep goes on. Never prints: progress
goes to the callbacks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.rundir import JobStatus
from runner import api
from runner.errors import Interrupted, SpecError
from runner.job import threads
from runner.job.image_plugins import on_image
from runner.job.spec import JobSpec, resolve
from runner.job.target import Target
from runner.results import rundir
from runner.results import study as studies

log = logging.getLogger(__name__)


@dataclass
class Callbacks:
    on_run_start: Callable[[int, studies.PlannedRun, api.Run], None] = lambda i, p, r: None
    on_event: Callable[[dict[str, Any]], None] = lambda event: None
    on_run_end: Callable[[int, studies.PlannedRun, api.Outcome], None] = lambda i, p, o: None


def holding_threads(target: Target, workers: Sequence[int]) -> Target:
    """The target with every worker's threads fixed for the whole study: the user's
    --threads, else the share of the cores that the study's largest worker count leaves each
    worker (runner/job/threads.py). Then 1 worker and 4 differ in workers alone, not in the
    threads each has: a scaling study that gave one worker the whole machine's threads would
    measure the thread pool. A cluster's pods get their launcher's threads."""
    if target.remote or target.threads_per_worker is not None or not workers:
        return target
    return replace(target, threads_per_worker=threads.default(max(workers)))


def new_study(
    benchmark: str,
    workers: Sequence[int],
    set_items: Sequence[str],
    runs_per_cell: int,
    target: Target,
    base_seed: int = 0,
    links: Sequence[str | None] = (None,),
) -> studies.Study:
    """The study record of a grid, validated: every cell resolves, and passes every check its
    runs' submit would make here (data, packages, device, link), before anything is written:
    a sweep that cannot run fails at once with the fix, not after an empty study."""
    grid, fixed = studies.parse_grid(set_items)
    _refuse_ambiguous_axes(set_items, grid)
    target = holding_threads(target, workers)
    planned = studies.plan(workers, grid, runs_per_cell, base_seed, links)
    specs: dict[Any, JobSpec] = {}  # one per cell: a cell's runs differ only in their seed
    for run in planned:
        placement = target.placement(run.workers, run.link)
        specs[run.cell] = _on_target(resolve(benchmark, _overrides(fixed, run), placement), target)
    _check_cells(list(specs.values()), target)
    return studies.Study(
        studies.new_study_id(benchmark), benchmark, tuple(workers), grid, fixed,
        runs_per_cell, target.where, planned, links=tuple(links),
    )  # fmt: skip


def _refuse_ambiguous_axes(set_items: Sequence[str], grid: dict[str, tuple[str, ...]]) -> None:
    """A swept key given by another --set too, or a value it repeats, is bad input, as a
    repeated worker count is: the study would record the other value and run without it
    (parse_grid keeps one axis a key, and a cell's value wins over a fixed one whatever their
    order), or run one cell twice on the same seeds as if they were two."""
    for key, values in grid.items():
        given = [item.strip() for item in set_items if item.partition("=")[0].strip() == key]
        if len(given) > 1:
            raise SpecError(
                "--set", f"{key} is swept and set again ({', '.join(given)}); give it once"
            )
        repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if repeated is not None:
            raise SpecError(
                "--set", f"{key}={','.join(values)} repeats {repeated!r}; give each value once"
            )


def _on_target(spec: JobSpec, target: Target) -> JobSpec:
    """On a cluster, a run with plugins goes only to an image known to carry them, loading
    them as the image installs them (runner/job/image_plugins.py), as submit's do."""
    return on_image(spec, target.image_plugins, target.where) if target.remote else spec


def _check_cells(specs: Sequence[JobSpec], target: Target) -> None:
    """Each cell's request made as submit makes it (the backend's dryrun: its preflight
    checks, nothing created or started), so what a run would refuse is refused now."""
    backend = target.make_backend()
    try:
        for spec in specs:
            backend.dryrun(spec, Path(spec.run_id))
    finally:
        backend.close()


def check_writable(results_root: Path) -> None:
    """Refuse, before anything is announced, a results directory the study record cannot be
    written to (read-only, full, not ours), as submit does by making the run directory first:
    a StorageError naming it. A probe of one page, written and removed, since a full disk
    may still make an empty file. Nothing is left behind either way: the folders it made go
    too, so run_study still knows a studies/ folder it made and may remove."""
    root = studies.studies_root(results_root)
    made = [p for p in (results_root, root) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".probe-")
        try:  # unbuffered: nothing left to flush (and fail) after the probe is gone
            os.write(fd, bytes(4096))
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        raise rundir.storage_error(err, root) from None
    finally:
        for path in reversed(made):  # the ones this check made, if it got that far
            with contextlib.suppress(OSError):
                path.rmdir()


class _Recorder:
    """The study as it stands, saved after every change (so an interrupt never loses one)."""

    def __init__(self, results_root: Path, study: studies.Study) -> None:
        self.results_root = results_root
        self.study = study
        studies.save(results_root, study)

    def update(self, position: int | None = None, **changes: Any) -> None:
        if position is None:
            self.study = replace(self.study, **changes)
        else:
            self.study = studies.with_run(self.study, position, **changes)
        studies.save(self.results_root, self.study)


def run_study(
    results_root: Path, study: studies.Study, target: Target, callbacks: Callbacks | None = None
) -> studies.Study:
    """Run every planned run that has no run id yet; returns the final record. A disk that
    refuses the study record (full, read-only, not ours) is a StorageError naming it; a study
    that never got on record leaves no directory behind."""
    study_dir = studies.studies_root(results_root) / study.study_id
    made = [p for p in (study_dir.parent, study_dir) if not p.exists()]
    target = holding_threads(target, study.workers)
    try:
        return _run_study(results_root, study, target, callbacks or Callbacks())
    except OSError as err:
        if study_dir in made and not (study_dir / studies.STUDY_FILE).exists():
            shutil.rmtree(study_dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # studies/, if this sweep made it and it is empty
                if study_dir.parent in made:
                    study_dir.parent.rmdir()
        raise rundir.storage_error(err, study_dir) from None


def _run_study(
    results_root: Path, study: studies.Study, target: Target, cb: Callbacks
) -> studies.Study:
    with studies.sweeping(results_root, study.study_id):  # before "running" is on disk
        recorder = _Recorder(results_root, study)
        try:
            for position, planned in enumerate(study.runs):
                if planned.run_id is None:
                    _run_one(recorder, position, target, cb)
        except BaseException:
            # Best effort: the error that stopped the sweep (a full disk, Ctrl-C) is the one
            # to report, not the same disk refusing this update too. A study left "running"
            # reads as partial anyway once the sweep lock is gone (studies.load).
            with contextlib.suppress(OSError):
                recorder.update(state="partial", finished_at=_now())
            raise
        recorder.update(state="complete", finished_at=_now())
    return recorder.study


def _run_one(recorder: _Recorder, position: int, target: Target, cb: Callbacks) -> None:
    study = recorder.study
    planned = study.runs[position]
    placement = target.placement(planned.workers, planned.link)
    spec = resolve(study.benchmark, _overrides(study.fixed, planned), placement)
    spec = _on_target(spec, target)
    backend = target.make_backend()
    try:
        run = api.submit(spec, backend, recorder.results_root)
    finally:
        backend.close()
    try:
        recorder.update(position, run_id=run.run_id)
    except BaseException:  # a run the study cannot name must not go on unfollowed
        _abandon(recorder.results_root, run)
        raise
    cb.on_run_start(position, planned, run)
    try:
        outcome = api.follow_to_end(recorder.results_root, run, api.Callbacks(on_event=cb.on_event))
    except (KeyboardInterrupt, Interrupted):  # follow_to_end cancelled the run
        recorder.update(position, state=_final_state(recorder.results_root, run))
        log.warning("sweep interrupted; cancelled %s", run.run_id)
        raise
    if outcome.missing:
        log.warning("%s is incomplete: %s", run.run_id, "; ".join(outcome.missing))
    recorder.update(position, state=outcome.status.state.value)
    cb.on_run_end(position, planned, outcome)


def _abandon(results_root: Path, run: api.Run) -> None:
    """Cancel a run this sweep will not follow. Its leash is kept where the cancel fails, so
    the run still ends when this process does."""
    try:
        api.cancel(results_root, run)
    except Exception as err:  # the error that got here is the one to report
        log.warning("could not cancel %s: %s", run.run_id, err)
        return
    api.release(results_root, run)


def _final_state(results_root: Path, run: api.Run) -> str:
    try:
        status: JobStatus = api.status(results_root, run)
    except Exception as err:  # the record must still be saved; say what we know
        log.warning("state of %s unknown after cancel: %s", run.run_id, err)
        return "CANCELLED"
    return status.state.value


def _overrides(fixed: Sequence[str], planned: studies.PlannedRun) -> list[str]:
    """The run's --set items: the fixed ones, its cell's values, and its seed (a run control,
    so the division stays closed); a fixed seed=N is the base the runs count from."""
    items = [i for i in fixed if not i.startswith("seed=")]
    return [*items, *(f"{k}={v}" for k, v in planned.sets), f"seed={planned.seed}"]


def base_seed(set_items: Sequence[str]) -> int:
    """The seed run 0 of each cell uses: a fixed --set seed=N (the last one, as later --set
    items win everywhere else), else 0."""
    seeds = [v for k, _, v in (i.partition("=") for i in set_items) if k.strip() == "seed"]
    if not seeds:
        return 0
    try:
        return int(seeds[-1])
    except ValueError:
        raise SpecError("--set", f"seed must be an integer, got {seeds[-1]!r}") from None


def _now() -> str:
    return datetime.now(UTC).isoformat()
