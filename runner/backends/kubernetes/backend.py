"""The Kubernetes backend: runs a JobSpec as a Kubeflow TrainJob or PyTorchJob, follows it, and
brings its results back into the run directory, with the same files as a local run.

Handles are `k8s://<namespace>/<name>`; the name is the run id, so the handle is known from the
rendered manifest before anything is created. A run is followed with watches (watch.py): no
polling, and state.json is written only when the state changes. With `results_root`, state.json
is also the memory of a job once it is deleted (by cancel, the pending timeout, or a complete
fetch), and a finished state is final: status, cancel, logs and fetch answer from the run
directory first, so a run whose job was never created (its submit failed) needs no cluster.

A job is the run's by its uid too, which submit records in job.json (`cluster.job_uid`): a job
deleted and made again under the run's name is another, so the run is FAILED, and the other
job's state, pods, logs and results are never read as the run's, nor is it ever deleted. A run
recorded without a uid (before they were) knows its job by name, as it always did.

Results come from the stack's results store when it has one (results_store.py); otherwise, or
for any file the store lacks or that fails its check, they are rebuilt from rank 0's own lines
(records.py). Every rank's log is split out of its pod's log, trusting only the ranks of the
pod's node (demux.py).

Not here: rendering (render/), stack outputs (connection.py), the API calls and their error
messages (client.py), reading job and pod states (observe.py), log following (follow.py),
collecting a finished run's files (collect.py). This module imports the kubernetes client;
the CLI imports it only for Kubernetes runs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contract.rundir import JobState, JobStatus, rank_log
from runner.backends.base import (
    KubernetesRequest,
    Request,
    kubernetes_handle,
    parse_kubernetes_handle,
)
from runner.backends.kubernetes import collect, demux, observe
from runner.backends.kubernetes.client import KubeApi, NameConflict, NotFound
from runner.backends.kubernetes.connection import (
    ClusterConnection,
    connect_reference,
    reference_problem,
)
from runner.backends.kubernetes.follow import EventFeed, LogFollower
from runner.backends.kubernetes.memory import RunMemory, record_in, record_uid, state_in
from runner.backends.kubernetes.render import render, to_yaml
from runner.backends.kubernetes.results_store import StoreLimits
from runner.backends.kubernetes.watch import Observers, View, WatchConfig
from runner.errors import RunnerError, SpecError
from runner.job.spec import JobSpec
from runner.results import rundir

log = logging.getLogger(__name__)
BACKEND_NAME = "kubernetes"
EVENTS_DRAIN_S = 30.0  # after the job ends, how long events() waits for rank 0's log tail
DEFAULT_WATCH = WatchConfig()
DEFAULT_LIMITS = StoreLimits()


def parse_handle(handle: str) -> tuple[str, str]:
    parsed = parse_kubernetes_handle(handle)
    if parsed is None:
        raise RunnerError(f"{handle!r} is not a Kubernetes handle (k8s://<namespace>/<name>)")
    return parsed


class KubernetesBackend:
    """One cluster connection; close() (or `with`) stops every watch and removes the
    credentials it wrote to disk. `conn` may be a callable, so that a finished run's status
    needs no cluster at all. `pending_timeout_s` (the CLI's --pending-timeout) enters here and
    only here: a job pending longer is deleted and recorded CANCELLED with the reason."""

    name = BACKEND_NAME

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
        if pending_timeout_s is not None and not pending_timeout_s > 0:
            raise SpecError("--pending-timeout", f"must be a positive number of seconds, got "
                            f"{pending_timeout_s!r}")  # fmt: skip
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
        self._finished: set[str] = set()  # jobs seen finished by this backend
        self._uids: dict[str, str | None] = {}  # job name -> the uid submit created it with

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
        uid = self.api.create_job(dict(request.manifest))
        log.info("submitted %s %s", self.api.resource.kind, handle)
        self._uids[name] = uid
        status = JobStatus(
            JobState.PENDING, "submitted; waiting for the job controller", self._now()
        )
        try:
            if uid is not None:  # before anything follows the job, so that all know it by it
                record_uid(Path(request.run_dir), uid)
            record_in(Path(request.run_dir), status)
        except BaseException:
            # The run is recorded FAILED ("submit failed"): its job must not run on unrecorded.
            with contextlib.suppress(RunnerError):
                self.api.delete_job(name, uid)
            raise
        return handle

    # ---- state -------------------------------------------------------------------------

    def status(self, handle: str) -> JobStatus:
        recorded = self._recorded_state(handle)
        if recorded is not None and recorded.state.finished:
            return recorded  # finished is final; the job itself may be deleted by now
        name = self._name(handle)
        try:
            job = self.api.get_job(name)
        except NotFound:
            return self._settle(name, None, self._vanished(name))
        if not self._ours(name, job):
            return self._settle(name, None, self._vanished(name, job))
        pods = self.api.list_objects("pods", collect.pods_selector(name))[0]
        status = observe.job_status(self.conn.job_api, job, pods, [])
        if status.state is JobState.PENDING:  # only then does an event say why
            events = self.api.list_objects("events", collect.WARNINGS)[0]
            status = observe.job_status(self.conn.job_api, job, pods, events)
        return self._settle(name, job, status)

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
                status = self._view_status(name, view)
                pending = status.state is JobState.PENDING
                observer.watch_events(pending)
                if pending and not view.events_synced:
                    continue  # the namespace's warnings are on their way: they may say why
                status = self._settle(name, view.job, status)
                timeout_s = self._pending_left_s(status) if pending else None
                if status != last:
                    last = status
                    yield status
                if status.state.finished:
                    return

    def _view_status(self, name: str, view: View) -> JobStatus:
        if view.job is None or not self._ours(name, view.job):
            return self._vanished(name, view.job)
        return observe.job_status(self.conn.job_api, view.job, view.pods, view.events)

    def _job_uid(self, name: str) -> str | None:
        """The uid submit created the job with (this process's, else job.json's); None for a
        run recorded without one, whose job is known by its name only."""
        if name not in self._uids:
            self._uids[name] = self._memory.job_uid(name)
        return self._uids[name]

    def _made_again(self, name: str) -> bool:
        """Whether the job of the run's name on the cluster is another than submit created
        (and, if so, the run is recorded as such); never for a run recorded without a uid."""
        if self._job_uid(name) is None:
            return False
        try:
            job = self.api.get_job(name)
        except NotFound:
            return False
        if self._ours(name, job):
            return False
        self._settle(name, None, self._vanished(name, job))
        return True

    def _ours(self, name: str, job: dict[str, Any]) -> bool:
        """Whether `job` is the one this run created, not another made under its name."""
        uid = self._job_uid(name)
        return uid is None or observe.job_uid(job) == uid

    def _settle(self, name: str, job: dict[str, Any] | None, status: JobStatus) -> JobStatus:
        """Apply the pending timeout to a fresh status, and record it; but a finished record
        is final. `runner cancel` elsewhere records CANCELLED before it deletes the job, and
        what this process sees of the job meanwhile (a pod's change, before the job's
        deletion reaches its watch) must not replace it: the run would then read as a job
        deleted behind the runner's back, FAILED."""
        recorded = self._memory.state(name)
        if recorded is not None and recorded.state.finished:
            self._finished.add(name)
            return recorded
        if job is not None and status.state is JobState.PENDING:
            left_s = self._pending_left_s(status)
            if left_s is not None and left_s <= 0:
                status = self._cancel_pending(name, status, observe.job_uid(job))
        self._record_state(name, status)
        return status

    def _vanished(self, name: str, impostor: dict[str, Any] | None = None) -> JobStatus:
        """The job is not on the cluster (or `impostor`, another job, has its name): what the
        run directory recorded (cancel records CANCELLED before it deletes), or else a job
        deleted behind the runner's back."""
        recorded = self._recorded_state(kubernetes_handle(self.conn.namespace, name))
        if recorded is not None and recorded.state.finished:
            return recorded
        kind = self.api.resource.kind
        if impostor is not None:
            return JobStatus(
                JobState.FAILED,
                f"the {kind} {name} that this run created (uid {self._job_uid(name)}) is no "
                f"longer on {self.conn.source}: it was deleted before it finished, and the "
                f"{kind} of that name there now (uid {observe.job_uid(impostor)}) is another",
                since=self._now(),
            )
        return JobStatus(
            JobState.FAILED,
            f"the {kind} {name} is no longer on {self.conn.source}: it was "
            "deleted before it finished (kubectl delete, a TTL, or a cancel from elsewhere)",
            since=self._now(),
        )

    def _pending_left_s(self, status: JobStatus) -> float | None:
        if self.pending_timeout_s is None or not status.since:
            return None
        return self.pending_timeout_s - self._pending_s(status)

    def _pending_s(self, status: JobStatus) -> float:
        since = datetime.fromisoformat(str(status.since).replace("Z", "+00:00"))
        return (self._clock() - since).total_seconds()

    def _cancel_pending(self, name: str, status: JobStatus, uid: str | None) -> JobStatus:
        reason = (
            f"pending for {self._pending_s(status):.0f} s, longer than --pending-timeout "
            f"{self.pending_timeout_s:.0f} s, so the job was deleted; it was waiting on: "
            f"{status.reason}"
        )
        cancelled = JobStatus(JobState.CANCELLED, reason=reason, since=self._now())
        self._record_state(name, cancelled)  # first: once deleted, the job cannot say why
        with contextlib.suppress(NotFound, NameConflict):  # gone, or another's by now
            self.api.delete_job(name, uid)
        log.warning("%s: %s", name, reason)
        return cancelled

    # ---- logs and events ---------------------------------------------------------------

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        name = parse_handle(handle)[1]
        shape = self._shape(name)
        if not 0 <= rank < shape.world_size:
            raise RunnerError(f"rank {rank} is out of range: the job has {shape.world_size} ranks")
        node = demux.NodeRanks(rank // shape.procs_per_node, shape.procs_per_node,
                               shape.world_size, shape.elastic)  # fmt: skip
        recorded = self._recorded_state(handle)
        archived = self._archived_log(name, rank)
        if archived is not None and recorded is not None and recorded.state.finished:
            yield from archived  # fetched: the run directory has it all, no cluster needed
            return
        self._name(handle)  # from here on the cluster is asked: it must be the run's
        if self._made_again(name):  # its pods are another job's: only what fetch archived
            if archived is None:
                raise RunnerError(
                    f"no log of rank {rank} of {name}: it was never archived by `runner "
                    f"fetch`, and the {self.api.resource.kind} of that name on "
                    f"{self.conn.source} is another, made after this run's was deleted"
                )
            yield from archived
            return
        recorded = self._recorded_state(handle)
        finished = recorded is not None and recorded.state.finished
        uid = self._job_uid(name)
        if not follow or finished:  # a finished run's log no longer grows: read, or say why not
            yield from collect.rank_lines(self.api, name, node, rank, archived, recorded, uid)
            return
        with self._observers.observing(name) as observer:
            follower = LogFollower(self.api, observer, node, rank, self._done,
                                   self.watch_config, job_uid=uid)  # fmt: skip
            try:
                yield from follower.lines()
            finally:
                follower.close()

    def events(self, handle: str) -> Iterator[list[dict[str, Any]]]:
        """Rank 0's events as its log grows, in batches; empty batches while there are none.
        Once the job has finished (as watch or status saw), it waits for the rest of rank 0's
        log (at most EVENTS_DRAIN_S), gives the last batch and ends."""
        name = self._name(handle)
        shape = self._shape(name)
        node = demux.NodeRanks(0, shape.procs_per_node, shape.world_size, shape.elastic)
        observer = self._observers.acquire(name)
        follower = LogFollower(self.api, observer, node, 0, self._done, self.watch_config,
                               job_uid=self._job_uid(name))  # fmt: skip
        feed = EventFeed(follower, on_end=lambda: self._observers.release(name))
        try:
            while True:
                if name in self._finished:
                    feed.wait_ended(EVENTS_DRAIN_S)
                batch = feed.take()
                if batch is None:
                    return
                yield batch
        finally:
            feed.close()

    def _done(self, view: View) -> bool:
        """Whether the job is over: finished, or gone from the cluster."""
        if view.job is None:
            return True
        return self._view_status(view.job["metadata"]["name"], view).state.finished

    def _archived_log(self, name: str, rank: int) -> Iterator[str] | None:
        run_dir = self._memory.run_dir(name)
        return None if run_dir is None else collect.open_rank_log(rank_log(run_dir, rank))

    # ---- results -----------------------------------------------------------------------

    def fetch(self, handle: str, dest: Path) -> list[str]:
        name = self._name(handle)
        harvest = collect.Harvest(
            self.api, self.conn, name, dest, self.store_limits, self._job_uid(name)
        )
        status = harvest.run()
        if harvest.job_gone:
            status = self._vanished(name, harvest.impostor)
        elif status is not None:
            status = harvest.verdict(status)  # a job's success is the run's only with a summary
            recorded = state_in(dest)
            if (
                recorded is not None
                and recorded.state.finished
                and status.state is JobState.SUCCEEDED
            ):
                # A finished record stands against the job's word (as in _settle): an earlier
                # fetch's verdict (no summary in rank 0's whole log) is not overturned by one
                # that could not read the log again (its pods gone). Only a verdict moves it.
                status = recorded
        if status is not None:
            record_in(dest, status)
        missing = harvest.missing()
        if missing and not harvest.archived and (status is None or status.state.finished):
            raise harvest.gone_error(handle, state_in(dest))
        if status is not None and status.state.finished and not missing and not harvest.job_gone:
            # The results are safe; stop paying for the job's pods. Only this run's job: one
            # made again under its name since is another's (the server refuses, 409).
            with contextlib.suppress(NotFound, NameConflict):
                self.api.delete_job(name, harvest.job_uid)
                log.info("deleted finished job %s after fetching it", handle)
        return missing

    def cancel(self, handle: str) -> None:
        recorded = self._recorded_state(handle)
        if recorded is not None and recorded.state.finished:
            return  # finished (or never created): nothing to stop, no cluster needed
        name = self._name(handle)
        try:
            job = self.api.get_job(name)
        except NotFound:
            return  # already gone: cancelling twice is fine
        if not self._ours(name, job):  # another job has its name: never ours to delete
            self._settle(name, None, self._vanished(name, job))
            return
        # An elastic job's end is read from its pods (observe.elastic_end): the operator's
        # Failed may stand while the survivors train on.
        shape = observe.job_shape(self.conn.job_api, job)
        pods = (
            self.api.list_objects("pods", collect.pods_selector(name))[0] if shape.elastic else []
        )
        if observe.job_status(self.conn.job_api, job, pods, []).state.finished:
            return  # a finished job keeps its pods (and logs) for fetch
        # Recorded first: once deleted, the job can no longer say that it was cancelled.
        self._record_state(name, JobStatus(JobState.CANCELLED, "cancelled", self._now()))
        with contextlib.suppress(NotFound, NameConflict):  # gone, or another's by now
            self.api.delete_job(name, observe.job_uid(job))

    def join(self, handle: str) -> str:
        # Raising the Worker replicas would create the next pod only while the job is
        # unfinished, but a run starts at MAX, so a join follows a departure, and by then
        # training-operator 1.9 has marked the job Failed (pytorchjob_controller.go,
        # UpdateJobStatus) and ReconcileJobs (common/job.go) no longer creates pods: a PATCH
        # would be accepted and do nothing (docs/adaptive-elastic.md, "Joining").
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

    def _shape(self, name: str) -> observe.Shape:
        """Nodes and processes per node: from job.json, else from the job on the cluster."""
        placement = self._memory.placement(name)
        if placement is not None:
            return observe.Shape(placement.num_nodes, placement.procs_per_node, placement.elastic)
        try:
            return observe.job_shape(self.conn.job_api, self.api.get_job(name))
        except NotFound:
            raise RunnerError(
                f"no {self.api.resource.kind} {name} in namespace {self.conn.namespace} on "
                f"{self.conn.source}, and no run directory records it"
            ) from None

    def _now(self) -> str:
        return self._clock().isoformat()

    def _recorded_state(self, handle: str) -> JobStatus | None:
        return self._memory.state(parse_handle(handle)[1])

    def _record_state(self, name: str, status: JobStatus) -> None:
        self._memory.record(name, status)
        if status.state.finished:
            self._finished.add(name)


def from_handle(
    handle: str, results_root: Path, store_limits: StoreLimits = DEFAULT_LIMITS
) -> KubernetesBackend:
    """The backend for a submitted run, from the `cluster` its job.json records."""
    _, name = parse_handle(handle)
    record = rundir.read_record(rundir.find(results_root, name))
    ref = record.cluster
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
