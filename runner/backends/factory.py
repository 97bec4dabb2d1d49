"""The one place backends are built: for a new run (`runner submit`, `runner sweep`, from the
options that name where it goes) and for a recorded run (every command that reads a run, from
its job.json). Nothing else imports a concrete backend, so `runner.api` and the dashboard
drive every backend through the protocol alone (tests/test_import_graph.py holds them to it).

Each builder imports its backend when called: the local backend needs psutil, the Kubernetes
one its client, and neither belongs on the start-up path of a command that does not use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from contract.rundir import JobStatus
from runner.backends.base import LOCAL_SCHEME, Backend, parse_kubernetes_handle

if TYPE_CHECKING:
    from runner.backends.kubernetes.connection import ClusterConnection
    from runner.results.rundir import RunRecord

LOCAL = "local"  # job.json's `backend` of a local run (RunRecord accepts it and "kubernetes")


def local(results_root: Path) -> Backend:
    """Runs on this machine, under results_root."""
    from runner.backends.local.backend import LocalBackend

    return LocalBackend(results_root)


def cluster(
    conn: ClusterConnection, results_root: Path, pending_timeout_s: float | None = None
) -> Backend:
    """Runs on the cluster `conn` names; a job pending longer than pending_timeout_s is
    deleted and recorded CANCELLED."""
    from runner.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(conn, results_root=results_root, pending_timeout_s=pending_timeout_s)


def for_record(
    record: RunRecord, results_root: Path, fetch_caps_mib: tuple[int, int] | None = None
) -> Backend:
    """The backend that ran the recorded run, rebuilt from its record (a cluster run
    reconnects only when asked something the cluster must answer); `fetch_caps_mib` (per
    file, per run) raises what a cluster fetch may copy from its results store."""
    if record.backend == LOCAL:
        return local(results_root)
    from runner.backends.kubernetes.backend import DEFAULT_LIMITS, from_handle
    from runner.backends.kubernetes.results_store import StoreLimits

    limits = DEFAULT_LIMITS
    if fetch_caps_mib is not None:
        limits = StoreLimits(fetch_caps_mib[0] << 20, fetch_caps_mib[1] << 20)
    return from_handle(record.handle, results_root, limits)


def handle_names(record: RunRecord, run_id: str) -> bool:
    """Whether the record's handle belongs to its backend and names the run `run_id`: a copied
    or renamed run directory keeps the original's record, whose handle would reach the
    original run (cancel it, report its state) rather than this one."""
    if record.backend == LOCAL:
        return record.handle == LOCAL_SCHEME + run_id
    parsed = parse_kubernetes_handle(record.handle)  # the job is named after the run
    return parsed is not None and parsed[1] == run_id


def listed_status(record: RunRecord, results_root: Path) -> JobStatus:
    """Backend.listed_status of the recorded run, its backend closed after."""
    backend = for_record(record, results_root)
    try:
        return backend.listed_status(record.handle)
    finally:
        backend.close()
