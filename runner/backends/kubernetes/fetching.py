"""`runner fetch` of a Kubernetes run: bring its files home (collect.Harvest), settle what its
record says, and, once every file is safe, delete its finished job so that its pods stop costing.

Only the run's own job is ever deleted: one made again under its name since is another's (the
server refuses the uid precondition, 409).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes import collect, runsecret
from runner.backends.kubernetes.api.apierrors import NameConflict, NotFound
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.follow.identity import JobIdentity
from runner.backends.kubernetes.follow.owners import PodOwners
from runner.backends.kubernetes.memory import record_in, state_in
from runner.backends.kubernetes.results_store import StoreLimits

log = logging.getLogger(__name__)


def fetch_run(
    api: KubeApi,
    conn: ClusterConnection,
    identity: JobIdentity,
    handle: str,
    name: str,
    dest: Path,
    limits: StoreLimits,
    owners: PodOwners | None = None,
) -> list[str]:
    """Fetch the run `name` into `dest`; what it still lacks (RunnerError when that can never
    be fetched any more)."""
    harvest = collect.Harvest(api, conn, name, dest, limits, identity.uid(name), owners)
    status = harvest.run()
    status = _settled(harvest, status, identity, name, state_in(dest))
    if status is not None:
        record_in(dest, status)
    missing = harvest.missing()
    if missing and not harvest.archived and (status is None or status.state.finished):
        raise harvest.gone_error(handle, state_in(dest))
    if status is not None and status.state.finished and not missing and not harvest.job_gone:
        with contextlib.suppress(NotFound, NameConflict):  # gone, or another's by now
            api.delete_job(name, harvest.job_uid)
            log.info("deleted finished job %s after fetching it", handle)
        runsecret.delete(api, name)
    return missing


def _settled(
    harvest: collect.Harvest,
    status: JobStatus | None,
    identity: JobIdentity,
    name: str,
    recorded: JobStatus | None,
) -> JobStatus | None:
    """What the run's record should say after this fetch (None: leave it as it is)."""
    if harvest.job_gone:
        return identity.vanished(name, harvest.impostor)
    if status is None:
        return None
    status = harvest.verdict(status)  # a job's success is the run's only with a summary
    if recorded is None or not recorded.state.finished:
        return status
    # A finished record stands against the job's word (as in the backend's _settle): an earlier
    # fetch's verdict (no summary in rank 0's whole log) is not overturned by one that could not
    # read the log again (its pods gone), nor is a failure's cause (the node, its exit code, read
    # from its pod) by the job's bare condition once the pods are gone. Only a failure moves a
    # SUCCEEDED record: a verdict, or a pod's failure that the job's success condition hid.
    moved = recorded.state is JobState.SUCCEEDED and status.state is JobState.FAILED
    return status if moved else recorded
