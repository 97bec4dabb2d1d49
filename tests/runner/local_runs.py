"""Local runs for the lifecycle tests: a run that only sleeps, and the wait for a run's processes
to be gone."""

from __future__ import annotations

from pathlib import Path

import psutil

from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local.backend import LocalBackend
from runner.job.spec import resolve
from runner.results import rundir


def gone(procs: list[psutil.Process], timeout_s: float = 30.0) -> None:
    """Wait until every one of `procs` has ended (a zombie, not yet reaped, counts)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def sleeping_run(results: Path, run_id: str) -> api.Run:
    """A live local run with a real supervisor whose one process sleeps (cheap to cancel)."""
    spec = resolve("cnn-digits", run_id=run_id)
    backend = LocalBackend(results)
    run_dir = rundir.create(results, rundir.RunRecord(spec, "local", f"local://{run_id}"))
    backend.submit(LocalRequest(str(run_dir.absolute()), (Process(("sleep", "60")),)))
    return api.open_run(results, run_id)
