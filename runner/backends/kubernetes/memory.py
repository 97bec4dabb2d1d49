"""The run directories as the Kubernetes backend's memory of its jobs: state.json, written only
when the state changes, and read back tolerating damage; the placement job.json records; the
cluster a run was submitted to (job.json's `cluster`, checked); the uid of the job submit
created (`cluster.job_uid`), which tells it apart from a job deleted and made again under the
same name; and which job controller ran it (`cluster.controller`, controller.py). A run
recorded before uids were (or whose record could not take it) has none, and its job is known
by its name, as it always was.

A finished state is final, and outlives the job on the cluster (deleted by cancel, the pending
timeout, a TTL or a complete fetch). Runs are found by name under `results_root`; a backend
without one (a sweep's) remembers nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contract import files
from contract.files import DamagedFile
from contract.rundir import JobStatus, read_state
from runner.backends.kubernetes.connection import reference_problem
from runner.errors import RunnerError
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

    def job_uid(self, name: str) -> str | None:
        run_dir = self.run_dir(name)
        return None if run_dir is None else uid_in(run_dir)

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
    try:
        rundir.write_state(run_dir, status)
    except OSError as err:  # a full or read-only disk, a planted link: one line, as local says
        raise rundir.storage_error(err, run_dir) from None


def cluster_reference(
    results_root: Path, name: str, handle: str
) -> tuple[Mapping[str, Any], float | None]:
    """job.json's `cluster` for the run `name` (the handle `handle`), checked: enough to build
    its backend again, and its pending timeout (None: none)."""
    ref = rundir.read_record(rundir.find(results_root, name)).cluster
    if not ref:
        raise RunnerError(
            f"{results_root / name}/job.json does not say which cluster ran {handle}; "
            "it was not submitted by this runner's Kubernetes backend"
        )
    problem = reference_problem(ref)
    if problem:
        raise RunnerError(f"{results_root / name}/job.json has {problem}; fix or remove it")
    timeout_s = ref.get("pending_timeout_s")
    if timeout_s is not None and (
        not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or timeout_s <= 0
    ):
        raise RunnerError(
            f"{results_root / name}/job.json has a cluster.pending_timeout_s that is not a "
            f"positive number of seconds ({timeout_s!r:.40}); fix or remove it"
        )
    return ref, timeout_s


JOB_UID = "job_uid"  # the key of job.json's `cluster` that holds it


def uid_in(run_dir: Path) -> str | None:
    """The uid of the job submit created, from job.json; None for a run recorded without one
    (or with one that is not text, which is reported and read as none)."""
    try:
        cluster = rundir.read_record(run_dir).cluster or {}
    except (DamagedFile, RunnerError) as err:
        log.warning("%s; the job is known by its name only", err)
        return None
    uid = cluster.get(JOB_UID)
    if uid is None or (isinstance(uid, str) and uid):
        return uid
    log.warning("%s has a cluster.%s that is not text (%r); the job is known by its name only",
                run_dir / rundir.JOB, JOB_UID, uid)  # fmt: skip
    return None


CONTROLLER = "controller"  # the key of job.json's `cluster` that says which controller ran it


def record_submitted(run_dir: Path, uid: str | None, controller: Mapping[str, str]) -> None:
    """Add the created job's uid (if the server said one) and the job controller that runs it
    (controller.py) to job.json's `cluster` (written atomically, like every record)."""
    if not (run_dir / rundir.JOB).is_file():
        return
    record = rundir.read_record(run_dir)
    uid_field = {JOB_UID: uid} if uid is not None else {}
    cluster = {**(record.cluster or {}), **uid_field, CONTROLLER: dict(controller)}
    updated = rundir.RunRecord(record.spec, record.backend, record.handle, cluster)
    files.write_json(run_dir / rundir.JOB, updated.to_dict())
