"""Deleting a cancelled run's job. A cancel (or the pending timeout) records CANCELLED before it
deletes the job, so that whatever watches the job meanwhile reads it as cancelled, not as a job
deleted behind the runner's back. When the delete then fails (the API server down), the record
must not say that nothing runs: it says that the job may, and that `runner cancel` deletes it,
which then asks the cluster again (about any other CANCELLED run it asks nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes import runsecret
from runner.backends.kubernetes.api.apierrors import NameConflict, NotFound
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.follow import observe
from runner.backends.kubernetes.follow.identity import JobIdentity
from runner.errors import RunnerError

NOT_DELETED = "; its job could not be deleted"  # the mark of a CANCELLED record whose job may run


def undeleted(cancelled: JobStatus, name: str, err: Exception) -> JobStatus:
    """`cancelled`, saying that its job may still run, why, and what deletes it."""
    # Both cut, so that the mark and the way out survive the record's cap on a reason.
    head, why = deleted(cancelled).reason[:200], str(err)[:250]
    reason = f"{head}{NOT_DELETED} and may still run ({why}); `runner cancel {name}` deletes it"
    return JobStatus(JobState.CANCELLED, reason, cancelled.since)


def not_deleted(status: JobStatus) -> bool:
    return status.state is JobState.CANCELLED and NOT_DELETED in status.reason


def deleted(cancelled: JobStatus) -> JobStatus:
    """`cancelled` once its job is deleted: its reason without the mark."""
    reason = cancelled.reason.partition(NOT_DELETED)[0]
    return JobStatus(JobState.CANCELLED, reason, cancelled.since)


def cancel(
    api: KubeApi,
    name: str,
    uid: str | None,
    cancelled: JobStatus,
    record: Callable[[JobStatus], None],
) -> None:
    """Record the run `name` `cancelled`, then delete its job (the job `uid`)."""
    record(cancelled)  # first: once deleted, the job can no longer say that it was cancelled
    delete_job(api, name, uid, cancelled, record)


def delete_job(
    api: KubeApi,
    name: str,
    uid: str | None,
    cancelled: JobStatus,
    record: Callable[[JobStatus], None],
) -> None:
    """Delete the job of the run `name`, recorded `cancelled`, and its Secret (runsecret.py);
    `record` writes its state."""
    try:
        with contextlib.suppress(NotFound, NameConflict):  # gone, or another's by now
            api.delete_job(name, uid)
    except RunnerError as err:
        record(undeleted(cancelled, name, err))
        raise
    runsecret.delete(api, name)
    if not_deleted(cancelled):
        record(deleted(cancelled))


def delete_again(
    api: KubeApi,
    identity: JobIdentity,
    name: str,
    cancelled: JobStatus,
    record: Callable[[JobStatus], None],
) -> None:
    """`runner cancel` of a run whose earlier delete failed: delete its job if it is still on
    the cluster (never another job made under its name since)."""
    try:
        job: dict[str, Any] | None = api.get_job(name)
    except NotFound:
        job = None
    if job is None or not identity.ours(name, job):
        record(deleted(cancelled))  # gone after all
        return
    delete_job(api, name, observe.job_uid(job), cancelled, record)
