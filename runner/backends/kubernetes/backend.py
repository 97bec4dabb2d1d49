"""The Kubernetes backend: runs a JobSpec as a Kubeflow TrainJob or PyTorchJob, follows it, and
brings its results back into the run directory, with the same files as a local run.

Handles are `k8s://<namespace>/<name>`; the name is the run id, so the handle is known from the
rendered manifest before anything is created. A run is followed with watches (watch.py): no
polling, and state.json is written only when the state changes. With `results_root`, state.json
is also the memory of a job once it is deleted (by cancel, the pending timeout, or a complete
fetch), and a finished state is final: status, cancel, logs and fetch answer from the run
directory first, so a run whose job was never created (its submit failed) needs no cluster.

A job is the run's by its uid too, which submit records in job.json (identity.py): a job
deleted and made again under the run's name is another, so the run is FAILED. Submit then makes
the run's own Secret, owned by the job, which the pods read the key of their signed elastic
records from (runsecret.py); whatever deletes the job deletes it too. Before the create, submit
reads which controller version will run the job, for job.json (controller.py; never a reason
for a submit to fail).

Results come from the stack's results store when it has one (results_store.py); otherwise, or
for any file the store lacks or that fails its check, they are rebuilt from rank 0's own lines
(records.py). Every rank's log is split out of its pod's log, trusting only the ranks of the
pod's node (demux.py).

Not here: rendering (render/), stack outputs (connection.py), the API calls and their error
messages (client.py), reading job and pod states (observe.py), settling and recording a run's
state (follow/states.py), which job is the run's (identity.py), the pending timeout's arithmetic
(pending.py), log following (follow/logs.py), fetch
(fetching.py, with collect.py). This module imports the kubernetes client; the CLI imports it
only for Kubernetes runs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from contract.rundir import JobState, JobStatus
from runner.backends.base import KubernetesRequest, Request, kubernetes_handle
from runner.backends.kubernetes import cancelling, collect, controller, demux, runsecret
from runner.backends.kubernetes.api.apierrors import NotFound
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.api.streams import Transient
from runner.backends.kubernetes.connection import ClusterConnection, connect_reference
from runner.backends.kubernetes.fetching import fetch_run
from runner.backends.kubernetes.follow import observe, overtime
from runner.backends.kubernetes.follow.identity import JobIdentity, parse_handle
from runner.backends.kubernetes.follow.logs import EventFeed, LogFollower
from runner.backends.kubernetes.follow.owners import PodOwners
from runner.backends.kubernetes.follow.pending import PendingTimeout
from runner.backends.kubernetes.follow.reflector import WatchConfig
from runner.backends.kubernetes.follow.states import RunStates
from runner.backends.kubernetes.follow.watch import Observers, View
from runner.backends.kubernetes.memory import (
    RunMemory,
    cluster_reference,
    record_in,
    record_submitted,
)
from runner.backends.kubernetes.render import render, to_yaml
from runner.backends.kubernetes.results_store import StoreLimits
from runner.errors import RunnerError, SpecError
from runner.job.spec import JobSpec

log = logging.getLogger(__name__)
BACKEND_NAME = "kubernetes"
SUBMITTED = "submitted; waiting for the job controller"  # a new job's state, until it is read
EVENTS_DRAIN_S = 30.0  # after the job ends, how long events() waits for rank 0's log tail
DEFAULT_WATCH = WatchConfig()
DEFAULT_LIMITS = StoreLimits()


class KubernetesBackend:
    """One cluster connection; close() (or `with`) stops every watch and removes the
    credentials it wrote to disk. `conn` may be a callable, so that a finished run's status
    needs no cluster at all. `pending_timeout_s` (the CLI's --pending-timeout) enters here and
    only here: a job pending longer is deleted and recorded CANCELLED with the reason."""

    name = BACKEND_NAME
    fetches_results = True

    def __init__(
        self,
        conn: ClusterConnection | Callable[[], ClusterConnection],
        results_root: Path | None = None,
        pending_timeout_s: float | None = None,
        watch_config: WatchConfig = DEFAULT_WATCH,
        store_limits: StoreLimits = DEFAULT_LIMITS,
        api_factory: Callable[[ClusterConnection], KubeApi] = KubeApi,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._pending = PendingTimeout(pending_timeout_s, clock)
        self._conn_source = conn
        self.results_root = results_root
        self._memory = RunMemory(results_root)
        self.pending_timeout_s = pending_timeout_s
        self.watch_config = watch_config
        self.store_limits = store_limits
        self._api_factory = api_factory
        self._api: KubeApi | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._observers = Observers(lambda: self.api, watch_config)
        self._identity = JobIdentity(self._memory, lambda: self.api, lambda: self.conn, self._now)
        self._owners = PodOwners(lambda: self.api)  # which pods of the run's label are its job's
        self._states = RunStates(self._memory, self._pending, self._identity, self._owners,
                                 lambda: self.conn, lambda: self.api, self._now)  # fmt: skip

    @functools.cached_property
    def conn(self) -> ClusterConnection:
        source = self._conn_source
        return source if isinstance(source, ClusterConnection) else source()

    @property
    def api(self) -> KubeApi:
        with self._lock:
            if self._api is None:
                self._api = self._api_factory(self.conn)
            return self._api

    @property
    def reference(self) -> dict[str, Any]:
        """For job.json's `cluster`: enough to build this backend again (`from_handle`)."""
        return {**self.conn.reference(), "pending_timeout_s": self.pending_timeout_s}

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._observers.close()
        with self._lock:
            api, self._api = self._api, None
        if api is not None:
            api.close()

    # ---- before anything runs ----------------------------------------------------------

    def dryrun(self, spec: JobSpec, run_dir: Path) -> KubernetesRequest:
        """The manifest submit would create; validated against the cluster (SpecError)."""
        return KubernetesRequest(run_dir=str(run_dir), manifest=render(spec, self.conn))

    def describe(self, request: Request) -> str:
        return to_yaml(dict(_kubernetes(request).manifest))

    def handle(self, request: Request) -> str:
        meta = _kubernetes(request).manifest["metadata"]
        return kubernetes_handle(meta.get("namespace") or self.conn.namespace, meta["name"])

    def submit(self, request: Request) -> str:
        request = _kubernetes(request)
        handle = self.handle(request)
        name = self._name(handle)  # the manifest's namespace is this connection's
        # Which controller will run it, read before the job exists: a slow answer delays
        # nothing that runs. Whatever the cluster says, the submit goes on (controller.py).
        ran_by = controller.read_controller(self.api, self.conn.job_api, self.conn.stack)
        try:
            uid = self.api.create_job(dict(request.manifest))
        except RunnerError as err:
            if isinstance(err, Transient):  # the server may have made it before the line went
                self._withdraw(name)
            raise
        except BaseException:  # a signal (runner.errors.Interrupted) or Ctrl-C mid-create
            self._withdraw(name)
            raise
        log.info("submitted %s %s", self.api.resource.kind, handle)
        self._identity.created(name, uid)
        status = JobStatus(JobState.PENDING, SUBMITTED, self._now())
        try:
            runsecret.create(self.api, name, uid)  # the job's pods wait for it
            # Before anything follows the job, so that all know it by its uid.
            record_submitted(Path(request.run_dir), uid, ran_by)
            record_in(Path(request.run_dir), status)
        except BaseException as err:
            # The run is recorded FAILED ("submit failed"): its job must not run on unrecorded.
            with contextlib.suppress(RunnerError):
                self.api.delete_job(name, uid)
            if not isinstance(err, runsecret.SecretTaken):  # never delete another's Secret
                runsecret.delete(self.api, name)
            raise
        return handle

    def _withdraw(self, name: str) -> None:
        """Delete the job a create cut short may have made (its answer never came), so that no
        job runs that the run's record (FAILED: interrupted, or the create's error) disowns.
        By name: the run's id, which no other run has."""
        try:
            self.api.delete_job(name)
        except NotFound:
            return
        except RunnerError as err:
            log.warning("%s; if the job was made, delete it: kubectl delete %s %s -n %s", err,
                        self.api.resource.plural, name, self.conn.namespace)  # fmt: skip
            return
        log.warning("deleted %s %s, which the interrupted create had made",
                    self.api.resource.kind, name)  # fmt: skip

    # ---- state -------------------------------------------------------------------------

    def status(self, handle: str) -> JobStatus:
        recorded = self._recorded_state(handle)
        if recorded is not None and recorded.state.finished:
            return recorded  # finished is final; the job itself may be deleted by now
        name = self._name(handle)
        try:
            job = self.api.get_job(name)
        except NotFound:
            return self._states.settle(name, None, self._identity.vanished(name))
        if not self._identity.ours(name, job):
            return self._states.settle(name, None, self._identity.vanished(name, job))
        pods = self.api.list_objects("pods", collect.pods_selector(name))[0]
        status = self._states.job_status(name, job, pods, [])
        if status.state is JobState.PENDING:  # only then does an event say why
            events = self.api.list_objects("events", collect.WARNINGS)[0]
            status = self._states.job_status(name, job, pods, events)
        return self._states.settle(name, job, status)

    def watch(self, handle: str) -> Iterator[JobStatus]:
        recorded = self._recorded_state(handle)
        if recorded is not None and recorded.state.finished:
            yield recorded
            return
        name = self._name(handle)
        with self._observers.observing(name) as observer:
            last, version, timeout_s = None, 0, None
            while True:
                version = observer.wait(version, timeout_s)
                view = observer.view()
                if view.closed:
                    return
                status = self._states.view_status(name, view, observer.pods_now)
                pending = status.state is JobState.PENDING
                observer.watch_events(pending)
                if pending and not view.events_synced:
                    continue  # the namespace's warnings are on their way: they may say why
                status = self._states.settle(name, view.job, status)
                timeout_s = self._states.wake_in_s(status)
                if status != last:
                    last = status
                    yield status
                if status.state.finished:
                    return

    # ---- logs and events ---------------------------------------------------------------

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        name = parse_handle(handle)[1]
        shape = collect.run_shape(self.api, self._memory.placement(name), name)
        if not 0 <= rank < shape.world_size:
            raise RunnerError(f"rank {rank} is out of range: the job has {shape.world_size} ranks")
        node = demux.NodeRanks(rank // shape.procs_per_node, shape.procs_per_node,
                               shape.world_size, shape.elastic)  # fmt: skip
        recorded = self._recorded_state(handle)
        archived = collect.archived_log(self._memory.run_dir(name), rank)
        if archived is not None and recorded is not None and recorded.state.finished:
            yield from archived  # fetched: the run directory has it all, no cluster needed
            return
        self._name(handle)  # from here on the cluster is asked: it must be the run's
        if self._states.made_again(name):  # its pods are another job's: only what fetch archived
            yield from collect.archived_only(self.api, name, rank, archived)
            return
        recorded = self._recorded_state(handle)
        finished = recorded is not None and recorded.state.finished
        uid = self._identity.uid(name)
        if not follow or finished:  # a finished run's log no longer grows: read, or say why not
            yield from collect.rank_lines(self.api, name, node, rank, archived, recorded, uid,
                                          self._owners)  # fmt: skip
            return
        with self._observers.observing(name) as observer:
            follower = LogFollower(self.api, observer, node, rank, self._done,
                                   self.watch_config, job_uid=uid, owners=self._owners)  # fmt: skip
            try:
                yield from follower.lines()
            finally:
                follower.close()

    def events(self, handle: str) -> Iterator[list[dict[str, Any]]]:
        """Rank 0's events as its log grows, in batches; empty batches while there are none.
        Once the job has finished (as watch or status saw), it waits for the rest of rank 0's
        log (at most EVENTS_DRAIN_S), gives the last batch and ends."""
        name = self._name(handle)
        shape = collect.run_shape(self.api, self._memory.placement(name), name)
        node = demux.NodeRanks(0, shape.procs_per_node, shape.world_size, shape.elastic)
        observer = self._observers.acquire(name)
        follower = LogFollower(self.api, observer, node, 0, self._done, self.watch_config,
                               job_uid=self._identity.uid(name), owners=self._owners)  # fmt: skip
        feed = EventFeed(follower, on_end=lambda: self._observers.release(name))
        try:
            while True:
                if name in self._states.finished:
                    feed.wait_ended(EVENTS_DRAIN_S)
                batch = feed.take()
                if batch is None:
                    return
                yield batch
        finally:
            feed.close()

    def _done(self, view: View) -> bool:
        """Whether a log follower may stop, once it has read its pod as the API server has it:
        the job is finished, gone, or reports success (the pods' watch may lag the job's)."""
        if view.job is None:
            return True
        status = self._states.view_status(view.job["metadata"]["name"], view)
        return status.state.finished or overtime.awaiting_ends(status)

    # ---- results -----------------------------------------------------------------------

    def fetch(self, handle: str, dest: Path) -> list[str]:
        name = self._name(handle)
        return fetch_run(self.api, self.conn, self._identity, handle, name, dest,
                         self.store_limits, self._owners)  # fmt: skip

    def cancel(self, handle: str) -> None:
        recorded = self._recorded_state(handle)
        record = partial(self._states.record, parse_handle(handle)[1])
        if recorded is not None and cancelling.not_deleted(recorded):  # an earlier delete failed
            cancelling.delete_again(self.api, self._identity, self._name(handle), recorded, record)
            return
        if recorded is not None and recorded.state.finished:
            return  # finished (or never created): nothing to stop, no cluster needed
        name = self._name(handle)
        try:
            job = self.api.get_job(name)
        except NotFound:
            return  # already gone: cancelling twice is fine
        if not self._identity.ours(name, job):  # another job has its name: never ours to delete
            self._states.settle(name, None, self._identity.vanished(name, job))
            return
        # Whether the job is over is read from its pods too: an elastic job's operator says
        # Failed while the survivors train on, a PyTorchJob's Succeeded while a Worker runs.
        pods = self.api.list_objects("pods", collect.pods_selector(name))[0]
        if self._states.job_status(name, job, pods, []).state.finished:
            return  # a finished job keeps its pods (and logs) for fetch
        cancelled = JobStatus(JobState.CANCELLED, "cancelled", self._now())
        cancelling.cancel(self.api, name, observe.job_uid(job), cancelled, record)

    def join(self, handle: str) -> str:
        # A run starts at MAX, so a join follows a departure, by when training-operator 1.9
        # has marked the job Failed (UpdateJobStatus) and ReconcileJobs creates no pods: a
        # PATCH of the Worker replicas would be accepted and do nothing.
        raise RunnerError(
            "joining a Kubernetes run is not supported: training-operator 1.9 creates no pod "
            "for a job it has marked Failed, which it does when a worker leaves; it is a "
            "local run's command (docs/adaptive-elastic.md, 'Joining')"
        )

    # ---- helpers -----------------------------------------------------------------------

    def _name(self, handle: str) -> str:
        namespace, name = parse_handle(handle)
        if namespace != self.conn.namespace:
            raise RunnerError(
                f"{handle} is in namespace {namespace}, but {self.conn.source} uses "
                f"{self.conn.namespace}; connect to the cluster the run was submitted to"
            )
        return name

    def _now(self) -> str:
        return self._clock().isoformat()

    def listed_status(self, handle: str) -> JobStatus:
        return self._recorded_state(handle) or JobStatus(JobState.PENDING, "no state recorded yet")

    def release(self, handle: str) -> None:
        return None  # nothing ties a cluster job to the process that submitted it

    def _recorded_state(self, handle: str) -> JobStatus | None:
        return self._memory.state(parse_handle(handle)[1])


def from_handle(
    handle: str, results_root: Path, store_limits: StoreLimits = DEFAULT_LIMITS
) -> KubernetesBackend:
    """The backend for a submitted run, from the `cluster` its job.json records."""
    ref, timeout_s = cluster_reference(results_root, parse_handle(handle)[1], handle)
    return KubernetesBackend(
        lambda: connect_reference(ref),
        results_root=results_root,
        pending_timeout_s=timeout_s,
        store_limits=store_limits,
    )


def _kubernetes(request: Request) -> KubernetesRequest:
    if not isinstance(request, KubernetesRequest):
        raise SpecError("--stack", f"a cluster cannot run {type(request).__name__}")
    return request
