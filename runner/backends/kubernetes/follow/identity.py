"""Which job on the cluster is a run's: the one its handle names (`k8s://<namespace>/<name>`)
that submit created, known by its uid (job.json's `cluster.job_uid`), not by its name alone. A
job deleted and made again under the run's name is another: its state, pods, logs and results
are never read as the run's, nor is it ever deleted, and the run is FAILED. A run recorded
without a uid (before they were) knows its job by name, as it always did.

Also what a run is once its job is gone: what the run directory recorded (cancel records
CANCELLED before it deletes), or else a job deleted behind the runner's back, FAILED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contract.rundir import JobState, JobStatus
from runner.backends.base import parse_kubernetes_handle
from runner.backends.kubernetes.api.apierrors import NotFound
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.follow import observe
from runner.backends.kubernetes.memory import RunMemory
from runner.errors import RunnerError


def parse_handle(handle: str) -> tuple[str, str]:
    """A run's handle, `k8s://<namespace>/<name>`, as (namespace, name): the job's name is the
    run id."""
    parsed = parse_kubernetes_handle(handle)
    if parsed is None:
        raise RunnerError(f"{handle!r} is not a Kubernetes handle (k8s://<namespace>/<name>)")
    return parsed


class JobIdentity:
    """`api` and `conn` are callables: a finished run's status needs no cluster at all."""

    def __init__(
        self,
        memory: RunMemory,
        api: Callable[[], KubeApi],
        conn: Callable[[], ClusterConnection],
        now: Callable[[], str],
    ) -> None:
        self._memory, self._api, self._conn, self._now = memory, api, conn, now
        self._uids: dict[str, str | None] = {}  # job name -> the uid submit created it with

    def created(self, name: str, uid: str | None) -> None:
        """This process's submit created the job `name` with `uid`."""
        self._uids[name] = uid

    def uid(self, name: str) -> str | None:
        """The uid submit created the job with (this process's, else job.json's); None for a
        run recorded without one, whose job is known by its name only."""
        if name not in self._uids:
            self._uids[name] = self._memory.job_uid(name)
        return self._uids[name]

    def ours(self, name: str, job: dict[str, Any]) -> bool:
        """Whether `job` is the one this run created, not another made under its name."""
        uid = self.uid(name)
        return uid is None or observe.job_uid(job) == uid

    def impostor(self, name: str) -> dict[str, Any] | None:
        """The job of the run's name on the cluster, if it is another than submit created;
        never for a run recorded without a uid (nor when there is no job of that name)."""
        if self.uid(name) is None:
            return None
        try:
            job = self._api().get_job(name)
        except NotFound:
            return None
        return None if self.ours(name, job) else job

    def vanished(self, name: str, impostor: dict[str, Any] | None = None) -> JobStatus:
        """The job is not on the cluster (or `impostor`, another job, has its name): what the
        run directory recorded, or else a job deleted behind the runner's back."""
        recorded = self._memory.state(name)
        if recorded is not None and recorded.state.finished:
            return recorded
        conn, kind = self._conn(), self._api().resource.kind
        if impostor is not None:
            return JobStatus(
                JobState.FAILED,
                f"the {kind} {name} that this run created (uid {self.uid(name)}) is no "
                f"longer on {conn.source}: it was deleted before it finished, and the "
                f"{kind} of that name there now (uid {observe.job_uid(impostor)}) is another",
                since=self._now(),
            )
        return JobStatus(
            JobState.FAILED,
            f"the {kind} {name} is no longer on {conn.source}: it was "
            "deleted before it finished (kubectl delete, a TTL, or a cancel from elsewhere)",
            since=self._now(),
        )
