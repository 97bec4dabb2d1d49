"""The Kubernetes backend: runs a JobSpec as a Kubeflow TrainJob or PyTorchJob, follows it, and
brings its results back into the run directory, with the same files as a local run.

Handles are `k8s://<namespace>/<name>`; the name is the run id. Results come from the stack's
results store when it has one; otherwise (or for any file the store lacks) they are rebuilt from
rank 0's `:::MLLOG` lines in its pod log, which carry the manifest and summary as events too.
Every rank's log is split out of its pod's log (torchrun prefixes lines with the rank).

Not here: rendering (render/), stack outputs (connection.py), the API plumbing and its
error messages (client.py), reading job and pod states (observe.py). This module imports the
kubernetes client; the CLI imports it only for Kubernetes runs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from contract import files
from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes import observe
from runner.backends.kubernetes.client import KubeApi, NotFound
from runner.backends.kubernetes.connection import ClusterConnection, connect_reference
from runner.backends.kubernetes.render import render
from runner.backends.kubernetes.render.common import RUN_ID_LABEL
from runner.backends.kubernetes.results_store import fetch_results
from runner.errors import RunnerError
from runner.job.spec import JobSpec
from runner.results import rundir
from workloads import mllog

log = logging.getLogger(__name__)
SCHEME = "k8s"
BACKEND_NAME = "kubernetes"


def make_handle(namespace: str, name: str) -> str:
    return f"{SCHEME}://{namespace}/{name}"


def parse_handle(handle: str) -> tuple[str, str]:
    url = urlparse(handle)
    name = url.path.strip("/")
    if url.scheme != SCHEME or not url.netloc or not name or "/" in name:
        raise RunnerError(f"{handle!r} is not a Kubernetes handle (k8s://<namespace>/<name>)")
    return url.netloc, name


class KubernetesBackend:
    """One cluster connection; close() (or `with`) removes the credentials it wrote to disk.

    With `results_root`, the run directory's state.json is kept current by status() and is the
    memory of a job once it is deleted (by cancel, the pending timeout, or a complete fetch).
    `conn` may be a callable, so that a finished run's status needs no cluster at all.
    """

    name = BACKEND_NAME

    def __init__(
        self,
        conn: ClusterConnection | Callable[[], ClusterConnection],
        results_root: Path | None = None,
        pending_timeout_s: float | None = None,
        poll_interval_s: float = 2.0,
        api_factory: Callable[[ClusterConnection], KubeApi] = KubeApi,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._conn_source = conn
        self.results_root = results_root
        self.pending_timeout_s = pending_timeout_s
        self.poll_interval_s = poll_interval_s
        self._api_factory = api_factory
        self._api: KubeApi | None = None
        self._clock = clock

    @functools.cached_property
    def conn(self) -> ClusterConnection:
        source = self._conn_source
        return source if isinstance(source, ClusterConnection) else source()

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = self._api_factory(self.conn)
        return self._api

    @property
    def container(self) -> str:
        return observe.CONTAINERS[self.conn.job_api]

    @property
    def reference(self) -> dict[str, Any]:
        """For job.json's `cluster`: enough to build this backend again (`from_handle`)."""
        return {**self.conn.reference(), "pending_timeout_s": self.pending_timeout_s}

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None

    # ---- the Backend protocol --------------------------------------------------------

    def submit(self, spec: JobSpec, run_dir: Path) -> str:
        manifest = render(spec, self.conn)
        self.api.create_job(manifest)
        handle = make_handle(self.conn.namespace, spec.run_id)
        log.info("submitted %s %s", self.api.resource.kind, handle)
        return handle

    def status(self, handle: str) -> JobStatus:
        recorded = self._recorded_state(handle)
        if recorded is not None and recorded.state.finished:
            return recorded  # finished is final; the job itself may be deleted by now
        name = self._name(handle)
        status = self._observe(self._get_job(name))
        if status.state is JobState.PENDING and self._pending_too_long(status):
            status = self._cancel_pending(name, status)
        self._record_state(name, status)
        return status

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        name = self._name(handle)
        shape = observe.job_shape(self.conn.job_api, self._get_job(name))
        if not 0 <= rank < shape.world_size:
            raise RunnerError(f"rank {rank} is out of range: the job has {shape.world_size} ranks")
        if not follow:
            yield from self._rank_lines(name, rank, shape, follow=False)
            return
        yield from self._follow(name, rank, shape)

    def fetch(self, handle: str, dest: Path) -> list[str]:
        name = self._name(handle)
        world_size = rundir.read_record(dest).spec.placement.world_size
        try:
            job: dict[str, Any] | None = self.api.get_job(name)
        except NotFound:
            job = None
        status = self._observe(job) if job is not None else None
        archived = self._archive_logs(job, dest) if job is not None else set()
        copied = self._fetch_results(name, dest)
        if status is not None:
            rundir.write_state(dest, status)
        missing = rundir.missing_results(dest, world_size)
        if missing and not archived and (status is None or status.state.finished):
            raise self._gone_error(handle, job is None, missing)
        if status is not None and status.state.finished and not missing:
            self.api.delete_job(name)  # the results are safe; stop paying for the job's pods
            log.info("deleted finished job %s after fetching it", handle)
        log.info("fetched %s: logs of ranks %s, results %s", handle, sorted(archived), copied)
        return missing

    def cancel(self, handle: str) -> None:
        name = self._name(handle)
        try:
            job = self.api.get_job(name)
        except NotFound:
            return  # already gone: cancelling twice is fine
        if self._observe(job).state.finished:
            return  # a finished job keeps its pods (and logs) for fetch
        # Recorded first: once deleted, the job can no longer say that it was cancelled.
        self._record_state(name, JobStatus(JobState.CANCELLED, "cancelled", self._now()))
        with contextlib.suppress(NotFound):
            self.api.delete_job(name)

    # ---- status ------------------------------------------------------------------------

    def _observe(self, job: dict[str, Any]) -> JobStatus:
        name = job["metadata"]["name"]
        pods = self._pods(name)
        job_api = self.conn.job_api
        by_node = observe.pods_by_node(job_api, pods)
        shape = observe.job_shape(job_api, job)
        if len(by_node) == shape.num_nodes and all(
            p.get("status", {}).get("phase") == "Running" for p in by_node.values()
        ):
            events: list[dict[str, Any]] = []  # running: no need to ask why it is not
        else:
            events = self.api.list_warning_events()
        return observe.job_status(job_api, job, pods, events)

    def _pending_too_long(self, status: JobStatus) -> bool:
        if self.pending_timeout_s is None or not status.since:
            return False
        return self._pending_s(status) > self.pending_timeout_s

    def _pending_s(self, status: JobStatus) -> float:
        since = datetime.fromisoformat(str(status.since).replace("Z", "+00:00"))
        return (self._clock() - since).total_seconds()

    def _cancel_pending(self, name: str, status: JobStatus) -> JobStatus:
        pending_s = self._pending_s(status)
        with contextlib.suppress(NotFound):
            self.api.delete_job(name)
        reason = (
            f"pending for {pending_s:.0f} s, longer than --pending-timeout "
            f"{self.pending_timeout_s:.0f} s, so the job was deleted; it was waiting on: "
            f"{status.reason}"
        )
        log.warning("%s: %s", name, reason)
        return JobStatus(JobState.CANCELLED, reason=reason, since=self._now())

    # ---- logs --------------------------------------------------------------------------

    def _rank_lines(
        self, name: str, rank: int, shape: observe.Shape, follow: bool
    ) -> Iterator[str]:
        node = rank // shape.procs_per_node
        pod = observe.pods_by_node(self.conn.job_api, self._pods(name)).get(node)
        if pod is None or not observe.container_started(pod):
            return
        lines = self.api.pod_log(pod["metadata"]["name"], self.container, follow=follow)
        first = node * shape.procs_per_node
        yield from (text for r, text in observe.split_ranks(lines, first) if r == rank)

    def _follow(self, name: str, rank: int, shape: observe.Shape) -> Iterator[str]:
        """Wait for the rank's pod, stream it, and after the stream ends look again: a new pod
        or a restarted container is streamed from its start; the same one resumes where it was
        (a dropped connection), skipping the lines already given. After the job ends, one last
        pass picks up the tail, then it returns."""
        node = rank // shape.procs_per_node
        seen: dict[tuple[str, int], int] = {}  # lines read per container run
        while True:
            try:
                job = self.api.get_job(name)
            except NotFound:
                return  # cancelled or deleted under us: nothing more will come
            finished = self._observe(job).state.finished
            pod = observe.pods_by_node(self.conn.job_api, self._pods(name)).get(node)
            if pod is not None and observe.container_started(pod):
                key = observe.container_key(pod, self.container)
                stream = self.api.pod_log(pod["metadata"]["name"], self.container, follow=True)
                lines = observe.split_ranks(stream, node * shape.procs_per_node)
                for i, (line_rank, text) in enumerate(lines):
                    if i >= seen.get(key, 0):
                        seen[key] = i + 1
                        if line_rank == rank:
                            yield text
            if finished:
                return
            time.sleep(self.poll_interval_s)

    def _archive_logs(self, job: dict[str, Any], dest: Path) -> set[int]:
        """Write logs/rank-N.log for every rank whose pod still exists; returns those ranks."""
        job_api, name = self.conn.job_api, job["metadata"]["name"]
        per_node = observe.job_shape(job_api, job).procs_per_node
        archived: set[int] = set()
        for node, pod in sorted(observe.pods_by_node(job_api, self._pods(name)).items()):
            if not observe.container_started(pod):
                continue
            first = node * per_node
            per_rank: dict[int, list[str]] = {r: [] for r in range(first, first + per_node)}
            lines = self.api.pod_log(pod["metadata"]["name"], self.container, follow=False)
            for rank, text in observe.split_ranks(lines, first):
                per_rank.setdefault(rank, []).append(text)
            for rank, rank_lines in per_rank.items():
                files.write_text(rundir.rank_log(dest, rank), "".join(f"{t}\n" for t in rank_lines))
                archived.add(rank)
        return archived

    # ---- results -----------------------------------------------------------------------

    def _fetch_results(self, name: str, dest: Path) -> list[str]:
        copied: list[str] = []
        if self.conn.results_store:
            try:
                copied = fetch_results(self.conn.results_store, name, dest)
            except RunnerError as err:
                log.warning("results store: %s; rebuilding the results from rank 0's log", err)
        lacking = [f for f in (rundir.EVENTS, rundir.SUMMARY, rundir.MANIFEST) if f not in copied]
        if lacking:
            copied += rebuild_from_log(rundir.rank_log(dest, 0), dest, lacking)
        return copied

    def _gone_error(self, handle: str, job_gone: bool, missing: list[str]) -> RunnerError:
        what = "is no longer on the cluster" if job_gone else "has ended and its pods are gone"
        store = self.conn.results_store or "none"
        return RunnerError(
            f"{handle} {what} (deleted, cancelled, or removed by a TTL), and the pod logs that "
            f"held its results went with them; still missing: {', '.join(missing)} (results "
            f"store: {store}). They cannot be fetched any more: rerun the benchmark "
            f"(`runner submit ...`) to get them"
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

    def _get_job(self, name: str) -> dict[str, Any]:
        try:
            return self.api.get_job(name)
        except NotFound:
            raise RunnerError(
                f"no {self.api.resource.kind} {name} in namespace {self.conn.namespace} on "
                f"{self.conn.source}: it was cancelled, or deleted after `runner fetch`; its last "
                "recorded state is in the run directory's state.json"
            ) from None

    def _pods(self, name: str) -> list[dict[str, Any]]:
        return self.api.list_pods(f"{RUN_ID_LABEL}={name}")

    def _now(self) -> str:
        return self._clock().isoformat()

    def _run_dir(self, name: str) -> Path | None:
        if self.results_root is None:
            return None
        run_dir = self.results_root / name
        return run_dir if (run_dir / rundir.JOB).is_file() else None

    def _recorded_state(self, handle: str) -> JobStatus | None:
        run_dir = self._run_dir(parse_handle(handle)[1])
        return rundir.read_state(run_dir) if run_dir is not None else None

    def _record_state(self, name: str, status: JobStatus) -> None:
        run_dir = self._run_dir(name)
        if run_dir is not None:
            rundir.write_state(run_dir, status)


def from_handle(handle: str, results_root: Path) -> KubernetesBackend:
    """The backend for a submitted run, from the `cluster` its job.json records."""
    _, name = parse_handle(handle)
    record = rundir.read_record(rundir.find(results_root, name))
    ref = record.cluster
    if not ref:
        raise RunnerError(
            f"{results_root / name}/job.json does not say which cluster ran {handle}; "
            "it was not submitted by this runner's Kubernetes backend"
        )
    return KubernetesBackend(
        lambda: connect_reference(ref),
        results_root=results_root,
        pending_timeout_s=ref.get("pending_timeout_s"),
    )


def rebuild_from_log(rank0_log: Path, dest: Path, wanted: list[str]) -> list[str]:
    """events.jsonl, manifest.json and summary.json from rank 0's `:::MLLOG` lines, as the
    workload would have written them; returns the names written."""
    try:
        with open(rank0_log, encoding="utf-8") as f:
            events = list(mllog.parse_lines(f))
    except FileNotFoundError:
        return []
    written = []
    if events and rundir.EVENTS in wanted:
        text = "".join(json.dumps(e, separators=(", ", ": ")) + "\n" for e in events)
        files.write_text(dest / rundir.EVENTS, text)
        written.append(rundir.EVENTS)
    for key, filename in ((mllog.MANIFEST, rundir.MANIFEST), (mllog.SUMMARY, rundir.SUMMARY)):
        values = [e.get("value") for e in events if e.get("key") == key]
        if values and filename in wanted:
            files.write_json(dest / filename, values[-1])
            written.append(filename)
    return written
