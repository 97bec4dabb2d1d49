"""A run's state as this process knows it: read from the job and its own pods (observe.py,
owners.py), the pending timeout applied (pending.py: a job pending too long is deleted and
recorded CANCELLED), and recorded in the run directory (memory.py), where a finished record is
final. What it is not: following the job (watch.py) or the Backend protocol (backend.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes import cancelling
from runner.backends.kubernetes.follow import observe, overtime
from runner.backends.kubernetes.follow.identity import JobIdentity
from runner.backends.kubernetes.follow.owners import PodOwners
from runner.backends.kubernetes.follow.pending import PendingTimeout
from runner.backends.kubernetes.follow.watch import View
from runner.backends.kubernetes.memory import RunMemory

if TYPE_CHECKING:
    from runner.backends.kubernetes.api.client import KubeApi
    from runner.backends.kubernetes.connection import ClusterConnection

log = logging.getLogger(__name__)


class RunStates:
    """The states of the runs a backend follows; `finished` holds those seen finished. The
    connection and the API client are callables: a finished run's state needs neither."""

    def __init__(
        self,
        memory: RunMemory,
        pending: PendingTimeout,
        identity: JobIdentity,
        owners: PodOwners,
        conn: Callable[[], ClusterConnection],
        api: Callable[[], KubeApi],
        now: Callable[[], str],
    ) -> None:
        self._memory, self._pending = memory, pending
        self._identity, self._owners = identity, owners
        self._conn, self._api, self._now = conn, api, now
        self.finished: set[str] = set()

    def view_status(
        self, name: str, view: View, pods_now: Callable[[], list[dict[str, Any]]] | None = None
    ) -> JobStatus:
        """The job's state from the view; with `pods_now`, a failure is read again from the
        pods as the API server has them now: the pods' watch may lag the job's (a success
        whose pods or exits the view does not show yet, observe.py), and a verdict is final."""
        if view.job is None or not self._identity.ours(name, view.job):
            return self._identity.vanished(name, view.job)
        status = self.job_status(name, view.job, view.pods, view.events)
        if status.state is JobState.FAILED and pods_now is not None:
            status = self.job_status(name, view.job, pods_now(), view.events)
        return status

    def job_status(
        self, name: str, job: dict[str, Any], pods: list[dict[str, Any]], events: list[Any]
    ) -> JobStatus:
        """The job's state from its own pods (owners.py: never another same-name job's)."""
        owner = self._owners.of(name, observe.job_uid(job), pods, job)
        return observe.job_status(self._conn().kind, job, pods, events, owner)

    def made_again(self, name: str) -> bool:
        """Whether the job of the run's name on the cluster is another than submit created
        (and, if so, the run is recorded as such); never for a run recorded without a uid."""
        impostor = self._identity.impostor(name)
        if impostor is not None:
            self.settle(name, None, self._identity.vanished(name, impostor))
        return impostor is not None

    def settle(self, name: str, job: dict[str, Any] | None, status: JobStatus) -> JobStatus:
        """Apply the pending timeout to a fresh status, and record it; but a finished record
        is final. `runner cancel` elsewhere records CANCELLED before it deletes the job, and
        what this process sees of the job meanwhile (a pod's change, before the job's
        deletion reaches its watch) must not replace it: the run would then read as a job
        deleted behind the runner's back, FAILED."""
        recorded = self._memory.state(name)
        if recorded is not None and recorded.state.finished:
            self.finished.add(name)
            return recorded
        if job is not None and status.state is JobState.PENDING:
            left_s = self._pending.left_s(status)
            if left_s is not None and left_s <= 0:
                status = self._cancel_pending(name, status, observe.job_uid(job))
        status = overtime.overdue(status, self._pending.age_s)  # a success's wait for a node
        self.record(name, status)
        return status

    def wake_in_s(self, status: JobStatus) -> float | None:
        """When to look again at an unchanged job: its pending timeout, or overtime.py's."""
        if status.state is JobState.PENDING:
            return self._pending.left_s(status)
        return overtime.ends_left_s(status, self._pending.age_s)

    def _cancel_pending(self, name: str, status: JobStatus, uid: str | None) -> JobStatus:
        cancelled = JobStatus(JobState.CANCELLED, self._pending.reason(status), self._now())
        cancelling.cancel(self._api(), name, uid, cancelled, partial(self.record, name))
        log.warning("%s: %s", name, cancelled.reason)
        return cancelled

    def record(self, name: str, status: JobStatus) -> None:
        self._memory.record(name, status)
        if status.state.finished:
            self.finished.add(name)
