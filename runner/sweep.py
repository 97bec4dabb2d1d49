"""Running a study: the grid's runs one after another through runner.api (submit, wait, fetch).

Sequential on purpose: runs of a scaling study must not share the machine or the cluster, or
their times would measure each other. The study record is saved before the first run and after
every change, so a sweep stopped by Ctrl-C (the current run is cancelled, the study marked
partial) or by a failed submit still reports what it got. A run that fails or misses the target
is a data point: the sweep goes on. Never prints: progress goes to the callbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.rundir import JobStatus
from runner import api
from runner.backends.base import Backend
from runner.errors import SpecError
from runner.job.spec import Placement, resolve
from runner.results import study as studies

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """Where the runs go: here (one node, `workers` processes) or a stack (`workers` processes
    spread over nodes of `procs_per_node` each)."""

    backend_name: str  # "local" or "kubernetes"
    make_backend: Callable[[], Backend]
    stack: str | None = None
    procs_per_node: int = 1
    device: str = "cpu"

    def placement(self, workers: int) -> Placement:
        if self.stack is None:
            return Placement(1, workers, self.device)  # type: ignore[arg-type]
        if workers % self.procs_per_node:
            raise SpecError(
                "--workers",
                f"{workers} workers do not fill nodes of {self.procs_per_node} (--per-node)",
            )
        return Placement(workers // self.procs_per_node, self.procs_per_node, self.device)  # type: ignore[arg-type]


@dataclass
class Callbacks:
    on_run_start: Callable[[int, studies.PlannedRun, api.Run], None] = lambda i, p, r: None
    on_event: Callable[[dict[str, Any]], None] = lambda event: None
    on_run_end: Callable[[int, studies.PlannedRun, api.Run, JobStatus], None] = lambda i, p, r, s: (
        None
    )


def new_study(
    benchmark: str,
    workers: Sequence[int],
    set_items: Sequence[str],
    runs_per_cell: int,
    target: Target,
    base_seed: int = 0,
) -> studies.Study:
    """The study record of a grid, validated: every cell resolves before anything runs."""
    grid, fixed = studies.parse_grid(set_items)
    planned = studies.plan(workers, grid, runs_per_cell, base_seed)
    for run in planned:
        resolve(benchmark, _overrides(fixed, run), target.placement(run.workers))
    where = f"stack {target.stack}" if target.stack else "local"
    return studies.Study(
        studies.new_study_id(benchmark), benchmark, tuple(workers), grid, fixed,
        runs_per_cell, where, planned,
    )  # fmt: skip


def run_study(
    results_root: Path, study: studies.Study, target: Target, callbacks: Callbacks | None = None
) -> studies.Study:
    """Run every planned run that has no run id yet; returns the final record."""
    cb = callbacks or Callbacks()
    studies.save(results_root, study)
    try:
        for position, planned in enumerate(study.runs):
            if planned.run_id is None:
                study = _run_one(results_root, study, position, target, cb)
    except BaseException:
        study = replace(study, state="partial", finished_at=_now())
        studies.save(results_root, study)
        raise
    study = replace(study, state="complete", finished_at=_now())
    studies.save(results_root, study)
    return study


def _run_one(
    results_root: Path, study: studies.Study, position: int, target: Target, cb: Callbacks
) -> studies.Study:
    planned = study.runs[position]
    spec = resolve(
        study.benchmark, _overrides(study.fixed, planned), target.placement(planned.workers)
    )
    backend = target.make_backend()
    try:
        run = api.submit(spec, backend, results_root, target.backend_name)
    finally:
        if hasattr(backend, "close"):  # a cluster backend holds credentials on disk
            backend.close()
    study = studies.with_run(study, position, run_id=run.run_id)
    studies.save(results_root, study)
    cb.on_run_start(position, planned, run)
    try:
        status = api.wait(results_root, run, cb.on_event)
    except KeyboardInterrupt:
        status = api.cancel(results_root, run)
        studies.save(results_root, studies.with_run(study, position, state=status.state.value))
        log.warning("sweep interrupted; cancelled %s", run.run_id)
        raise
    if not run.handle.startswith("local://") and status.state.value == "SUCCEEDED":
        missing = api.fetch(results_root, run)
        if missing:
            log.warning("%s is incomplete: %s", run.run_id, "; ".join(missing))
    study = studies.with_run(study, position, state=status.state.value)
    studies.save(results_root, study)
    cb.on_run_end(position, planned, run, status)
    return study


def _overrides(fixed: Sequence[str], planned: studies.PlannedRun) -> list[str]:
    """The run's --set items: the fixed ones, its cell's values, and its seed (a run control,
    so the division stays closed); a fixed seed=N is the base the runs count from."""
    items = [i for i in fixed if not i.startswith("seed=")]
    return [*items, *(f"{k}={v}" for k, v in planned.sets), f"seed={planned.seed}"]


def base_seed(set_items: Sequence[str]) -> int:
    """The seed run 0 of each cell uses: a fixed --set seed=N, else 0."""
    for item in set_items:
        key, _, value = item.partition("=")
        if key.strip() == "seed":
            try:
                return int(value)
            except ValueError:
                raise SpecError("--set", f"seed must be an integer, got {value!r}") from None
    return 0


def _now() -> str:
    return datetime.now(UTC).isoformat()
