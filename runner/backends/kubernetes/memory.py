"""The run directories as the Kubernetes backend's memory of its jobs: state.json, written only
when the state changes, and read back tolerating damage; and the placement job.json records.

A finished state is final, and outlives the job on the cluster (deleted by cancel, the pending
timeout, a TTL or a complete fetch). Runs are found by name under `results_root`; a backend
without one (a sweep's) remembers nothing.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from contract.files import DamagedFile
from contract.rundir import JobStatus, read_state
from runner.job.spec import Placement
from runner.results import rundir

log = logging.getLogger(__name__)


class RunMemory:
    def __init__(self, results_root: Path | None) -> None:
        self.results_root = results_root

    def run_dir(self, name: str) -> Path | None:
        if self.results_root is None:
            return None
        run_dir = self.results_root / name
        return run_dir if (run_dir / rundir.JOB).is_file() else None

    def state(self, name: str) -> JobStatus | None:
        run_dir = self.run_dir(name)
        return None if run_dir is None else state_in(run_dir)

    def record(self, name: str, status: JobStatus) -> None:
        run_dir = self.run_dir(name)
        if run_dir is not None:
            record_in(run_dir, status)

    def placement(self, name: str) -> Placement | None:
        run_dir = self.run_dir(name)
        return None if run_dir is None else rundir.read_record(run_dir).spec.placement


def state_in(run_dir: Path) -> JobStatus | None:
    """state.json; None when there is none, or it is damaged (the cluster is asked, and what it
    says is recorded afresh)."""
    try:
        return read_state(run_dir)
    except DamagedFile as err:
        log.warning("%s; asking the cluster instead", err)
        return None


def record_in(run_dir: Path, status: JobStatus) -> None:
    """state.json, written only when it changes (and only into an existing run)."""
    if not (run_dir / rundir.JOB).is_file():
        return
    with contextlib.suppress(DamagedFile):
        if read_state(run_dir) == status:
            return
    rundir.write_state(run_dir, status)
