"""Following a Kubernetes job with watches (KubernetesBackend.watch and events) against the fake
API server: each change yielded once, a dropped connection resumed from the last version seen
(no change lost or repeated), a 410 Gone answered with a new list, warning events asked for only
while the job is pending, the pending timeout, state.json written only on a change, and a number
of API requests set by the job's changes, not by how long it runs."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from contract.events import PREFIX
from contract.rundir import JobState, JobStatus, read_state
from runner.backends.kubernetes.api.client import Selector
from runner.backends.kubernetes.backend import KubernetesBackend
from runner.backends.kubernetes.follow.reflector import Backoff, Reflector, Store, WatchConfig
from runner.errors import RunnerError
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, complete, iso, make_backend, make_spec, pod, submit

pytestmark = pytest.mark.timeout(60)
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
PENDING_CONDITIONS = [{"type": "PodScheduled", "status": "False", "message": UNSCHEDULABLE}]


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(namespace="bench")
    yield fake
    fake.close()


class Watching:
    """runner.api's side of a watch: the statuses of backend.watch(handle), read on a thread."""

    def __init__(self, backend: KubernetesBackend, handle: str) -> None:
        self._queue: queue.Queue[JobStatus | BaseException | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(backend, handle), daemon=True)
        self._thread.start()

    def _run(self, backend: KubernetesBackend, handle: str) -> None:
        try:
            for status in backend.watch(handle):
                self._queue.put(status)
            self._queue.put(None)
        except BaseException as err:
            self._queue.put(err)

    def next(self, timeout_s: float = 10) -> JobStatus | None:
        """The next status; None when the watch has ended."""
        item = self._queue.get(timeout=timeout_s)
        if isinstance(item, BaseException):
            raise item
        return item

    def rest(self) -> list[JobStatus]:
        statuses = []
        while (status := self.next()) is not None:
            statuses.append(status)
        return statuses


def two_pending_pods(cluster: FakeCluster) -> None:
    """Node 1 cannot be scheduled (and so the job waits on it, whatever node 0 does)."""
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Pending", conditions=PENDING_CONDITIONS), log="")
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Running"), log="")


def states(statuses: list[JobStatus]) -> list[str]:
    return [s.state.value for s in statuses]


# ---- changes ---------------------------------------------------------------------------------


def test_watch_yields_each_change_once_and_records_it(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    first = watching.next()
    assert first.state is JobState.PENDING and "create the pods" in first.reason
    two_pending_pods(cluster)
    unschedulable = watching.next()
    assert UNSCHEDULABLE in unschedulable.reason
    assert read_state(run_dir) == unschedulable
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Running"))
    assert watching.next().state is JobState.RUNNING
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    assert read_state(run_dir).state is JobState.SUCCEEDED
    backend.close()


def test_state_json_is_written_only_when_the_state_changes(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Running"), log="")
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.RUNNING
    written = os.stat(run_dir / rundir.STATE)
    for annotation in range(5):  # changes to the pods that do not change the job's state
        running = pod("trainjob", RUN_ID, 1, "Running")
        running["metadata"]["annotations"]["note"] = str(annotation)
        cluster.add_pod(running)
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    # Written once more (SUCCEEDED), by an atomic replace; never for the five changes between.
    assert os.stat(run_dir / rundir.STATE).st_ino != written.st_ino
    backend.close()


def test_a_finished_run_is_answered_from_its_record_without_watching(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    complete(cluster, "trainjob")
    assert states(list(backend.watch(handle))) == ["SUCCEEDED"]
    before = cluster.requests()
    assert states(list(backend.watch(handle))) == ["SUCCEEDED"]
    assert cluster.requests() == before
    backend.close()


def test_a_job_deleted_behind_the_runners_back_ends_the_watch_as_failed(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    make_backend(cluster, tmp_path / "elsewhere", "trainjob").api.delete_job(RUN_ID)
    (gone,) = watching.rest()
    assert gone.state is JobState.FAILED and "deleted before it finished" in gone.reason
    assert read_state(run_dir) == gone
    backend.close()


def test_a_cancel_during_a_watch_ends_it_as_cancelled(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    backend.cancel(handle)
    assert states(watching.rest()) == ["CANCELLED"]
    backend.close()


def test_a_change_seen_between_a_cancels_record_and_its_delete_keeps_the_run_cancelled(
    cluster, tmp_path
):
    """`runner cancel` in another process records CANCELLED, then deletes the job; a change
    the follower sees in between (a pod's, before the job's deletion reaches its watch) must
    not overwrite that record, or the run ends FAILED as a job deleted behind its back."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Running"), log="")
    watching = Watching(backend, handle)
    status = watching.next()
    while status is not None and status.state is not JobState.RUNNING:  # up to the run's start
        status = watching.next()
    cancelled = JobStatus(JobState.CANCELLED, "cancelled", iso(600))
    rundir.write_state(run_dir, cancelled)  # the other process's cancel, before its delete
    # A new start time: without the record's word, this change is a RUNNING of its own.
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Running", startTime=iso(90)), log="")
    assert watching.next() == cancelled
    make_backend(cluster, tmp_path / "elsewhere", "trainjob").api.delete_job(RUN_ID)
    assert watching.rest() == []
    assert read_state(run_dir) == cancelled
    backend.close()


# ---- faults ----------------------------------------------------------------------------------


def test_a_dropped_connection_is_resumed_without_losing_or_repeating_a_change(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    two_pending_pods(cluster)
    watching = Watching(backend, handle)
    assert UNSCHEDULABLE in watching.next().reason
    # The next three watches fail: the reflectors back off; the change meanwhile waits for them.
    cluster.fail("get", r"/(pods|trainjobs)$", 503, times=3, watch=True)
    cluster.drop_connections()
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Running"))
    assert watching.next().state is JobState.RUNNING
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    # Resumed from the versions seen: one list of each, never a second.
    assert cluster.requests("get", r"/pods$", watch=False) == 1
    assert cluster.requests("get", r"/trainjobs$", watch=False) == 1
    assert cluster.requests("get", r"/(pods|trainjobs)$", watch=True) >= 5
    backend.close()


class RecordingStore(Store):
    """A Store that also keeps every change a reflector applied, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[tuple[str, str, str]] = []

    def apply(self, collection: str, kind: str, obj: dict) -> None:
        self.applied.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        super().apply(collection, kind, obj)


def test_a_reflector_applies_every_change_exactly_once_across_dropped_connections(
    cluster, tmp_path
):
    backend = make_backend(cluster, tmp_path, "trainjob")
    store = RecordingStore()
    selector = Selector(label=f"stackbench/run-id={RUN_ID}")
    reflector = Reflector(backend.api, "pods", selector, store, backend.watch_config)
    reflector.start()
    try:
        with store.changed:  # listed (nothing yet): from here on, every change is a watch event
            assert store.changed.wait_for(lambda: "pods" in store.synced, timeout=10)
        changes = []
        for round_ in range(4):
            for node in range(3):
                running = pod("trainjob", RUN_ID, node, "Running")
                running["metadata"]["annotations"]["round"] = str(round_)
                cluster.add_pod(running)
                changes.append(running["metadata"]["name"])
            if round_ % 2 == 0:  # a drop, and the reconnects failing for a while
                cluster.fail("get", r"/pods$", 503, times=2, watch=True)
                cluster.drop_connections()
        deadline = time.monotonic() + 10
        while len(store.applied) < len(changes) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # anything more (a repeat) would arrive now
    finally:
        reflector.stop()
    history = [
        (c.event["type"], c.event["object"]["metadata"]["name"], str(c.version))
        for c in cluster.emulator.history
        if c.plural == "pods"
    ]
    assert store.error is None
    assert store.applied == history
    assert [name for _, name, _ in store.applied] == changes


@pytest.mark.parametrize("how", ["error event", "http status"])
def test_a_version_too_old_to_resume_from_is_answered_with_a_new_list(cluster, tmp_path, how):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Running"), log="")
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.RUNNING
    if how == "error event":
        cluster.compact()  # the server forgets the versions the watches would resume from
    else:
        cluster.fail("get", r"/trainjobs$", 410, watch=True, message="too old resource version")
    cluster.drop_connections()
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    assert cluster.requests("get", r"/trainjobs$", watch=False) == 2  # listed again
    backend.close()


def test_a_watch_that_cannot_reconnect_gives_up_with_one_line_naming_the_cluster(cluster, tmp_path):
    config = WatchConfig(min_timeout_s=5, backoff_initial_s=0.01, backoff_max_s=0.02, jitter=0,
                         give_up_s=0.3)  # fmt: skip
    backend = make_backend(cluster, tmp_path, "trainjob", watch_config=config)
    handle, _ = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    cluster.fail("get", r"/(pods|trainjobs)$", 503, times=10_000)
    cluster.drop_connections()
    with pytest.raises(RunnerError) as err:
        watching.next()
    message = str(err.value)
    assert "\n" not in message and "HTTP 503" in message and "--stack gke-gpu-8" in message
    assert "runner status" in message
    backend.close()


def test_a_watch_refused_by_rbac_fails_at_once_with_the_fix(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.fail("get", r"/pods$", 403, watch=True, message='pods is forbidden: cannot "watch"')
    with pytest.raises(RunnerError, match=r"forbidden by RBAC.*kubectl auth can-i"):
        list(backend.watch(handle))
    backend.close()


# ---- pending ---------------------------------------------------------------------------------


def test_warning_events_are_watched_only_while_the_job_is_pending(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    quota = 'pods "x" is forbidden: exceeded quota: gpu-quota'
    cluster.add_event({
        "metadata": {"name": "ev1", "namespace": "bench"}, "type": "Warning",
        "reason": "FailedCreate", "message": quota, "lastTimestamp": iso(30),
        "involvedObject": {"kind": "Job", "name": f"{RUN_ID}-node-0"},
    })  # fmt: skip
    watching = Watching(backend, handle)
    assert "exceeded quota" in watching.next().reason
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Running"), log="")
    assert watching.next().state is JobState.RUNNING
    # Node 1's pod is replaced (evicted): pending again, and the events are asked for again.
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Pending", conditions=PENDING_CONDITIONS))
    assert UNSCHEDULABLE in watching.next().reason
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Running"))
    assert watching.next().state is JobState.RUNNING
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert states(watching.rest()) == ["SUCCEEDED"]
    assert cluster.requests("get", r"/events$", watch=False) == 2  # once per pending spell
    assert cluster.requests("get", r"/events$", watch=True) == 2
    backend.close()


def test_watch_cancels_a_job_pending_past_the_timeout_and_says_why(cluster, tmp_path):
    # The job was created at 00:00:00; the clock starts 0.3 s short of the timeout and runs.
    started = time.monotonic()
    base = datetime.fromisoformat("2030-01-01T00:09:59.700+00:00")
    clock = lambda: base + timedelta(seconds=time.monotonic() - started)  # noqa: E731
    backend = make_backend(cluster, tmp_path, "trainjob", pending_timeout_s=600, clock=clock)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    two_pending_pods(cluster)
    statuses = list(backend.watch(handle))
    assert states(statuses)[-1] == "CANCELLED"
    reason = statuses[-1].reason
    assert "longer than --pending-timeout 600 s" in reason and UNSCHEDULABLE in reason
    assert cluster.job("trainjob", RUN_ID) is None
    assert read_state(run_dir) == statuses[-1]
    backend.close()


# ---- events and the cost of following --------------------------------------------------------


def follow(
    backend: KubernetesBackend, handle: str, running: threading.Event | None = None
) -> tuple[list[JobStatus], list[dict]]:
    """What runner.api does to follow a run: statuses from watch() on a thread, and, between
    them, rank 0's events taken in batches, until both have ended. `running` is set once a
    RUNNING status has come."""
    watching = Watching(backend, handle)
    feed = backend.events(handle)
    statuses: list[JobStatus] = []
    events: list[dict] = []
    watched = fed = False
    while not (watched and fed):
        if not watched:
            with contextlib.suppress(queue.Empty):
                status = watching.next(timeout_s=0.01)
                watched = status is None
                statuses += [status] if status else []
                if running is not None and status and status.state is JobState.RUNNING:
                    running.set()
        if not fed:
            batch = next(feed, None)
            fed = batch is None
            events += batch or []
    return statuses, events


def step_event(step: int) -> str:
    event = {"key": "step", "value": step, "event_type": "POINT_IN_TIME", "time_ms": 1}
    return PREFIX + json.dumps(event)


def run_a_job(
    cluster: FakeCluster, running_s: float, lines: int, seen_running: threading.Event
) -> None:
    """The controllers' side: pods appear, run for running_s printing `lines` events from
    rank 0 (and a forged one from node 1), and the job completes, not before the follower
    has seen it running (a follower held up longer than the job runs would rightly go from
    PENDING to SUCCEEDED: that is the machine's timing, not what this test is about)."""
    time.sleep(0.2)
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Pending", conditions=PENDING_CONDITIONS))
    time.sleep(0.2)
    node0 = pod("trainjob", RUN_ID, 0, "Running")
    cluster.add_pod(node0, log="[rank0]:starting\n")
    cluster.add_pod(pod("trainjob", RUN_ID, 1, "Running"), log=f"[rank0]:{step_event(-1)}\n")
    for step in range(lines):
        time.sleep(running_s / lines)
        line = step_event(step)
        cluster.append_log(node0["metadata"]["name"], f"[rank0]:{line}\n[rank1]:{line}\n")
    seen_running.wait(timeout=60)
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Succeeded"))
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")


@pytest.mark.parametrize("running_s", [0.5, 2.0])
def test_following_a_job_costs_requests_by_its_changes_not_its_length(cluster, tmp_path, running_s):
    config = WatchConfig(min_timeout_s=300, jitter=0)
    backend = make_backend(cluster, tmp_path, "trainjob", watch_config=config)
    handle, _ = submit(backend, tmp_path, make_spec(nodes=2, procs=2))
    before = cluster.requests()
    seen_running = threading.Event()
    controllers = threading.Thread(target=run_a_job, args=(cluster, running_s, 20, seen_running))
    controllers.start()
    statuses, events = follow(backend, handle, seen_running)
    controllers.join()
    assert states(statuses)[-2:] == ["RUNNING", "SUCCEEDED"], statuses
    # Rank 0's own events, every one, in order; nothing node 1 forged, nothing rank 1 printed
    # (its lines are its own, not rank 0's).
    assert [e["value"] for e in events] == list(range(20))
    # A list and a watch each for the job, its pods and (while pending) the warning events,
    # one GET of the TrainJob's JobSet (whose uid tells its pods apart, owners.py), one
    # followed log, and the pods listed once more when the job is over (LogFollower): the
    # same whether the job runs 0.5 s or 2 s.
    made = cluster.requests() - before
    assert made <= 9, made
    assert cluster.requests("GET", "/jobsets/") == 1
    backend.close()


def test_closing_the_backend_ends_its_watches_and_removes_the_credentials(cluster, tmp_path):
    others = set(Path(tempfile.gettempdir()).glob("stackbench-kube-*"))
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    credentials = set(Path(tempfile.gettempdir()).glob("stackbench-kube-*")) - others
    assert credentials
    backend.close()
    assert watching.next() is None  # the watch ended quietly
    deadline = time.monotonic() + 5
    while any(t.name.startswith("watch ") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a watch thread outlived close()"
        time.sleep(0.01)
    assert not any(p.exists() for p in credentials)


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_quiet_spell():
    now = [0.0]
    config = WatchConfig(backoff_initial_s=0.8, backoff_max_s=30, backoff_reset_s=120, jitter=0)
    backoff = Backoff(config, clock=lambda: now[0])
    assert [backoff.failure() for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    now[0] = 50.0
    assert backoff.failing_for_s() == 50.0  # the give-up clock
    backoff.success()
    assert backoff.failing_for_s() == 0.0
    assert backoff.failure() == 30  # a success alone does not reset the delay...
    now[0] = 200.0
    assert backoff.failure() == 0.8  # ...two quiet minutes do


@pytest.mark.parametrize("metadata", ["garbage", {"resourceVersion": {"x": 1}}, None])
def test_a_bookmark_of_the_wrong_shape_is_no_version_and_the_watch_goes_on(
    cluster, tmp_path, metadata
):
    """A bookmark carries nothing but a version, so its object is not checked as a changed
    one is: one with no usable version moves nothing, rather than end the follower with a
    Python error."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    watching = Watching(backend, handle)
    assert watching.next().state is JobState.PENDING
    bookmark = {"type": "BOOKMARK", "object": {"metadata": metadata}}
    for plural in ("pods", "trainjobs"):
        cluster.send_watch_event(plural, bookmark)
    complete(cluster, "trainjob")
    assert states(watching.rest())[-1] == "SUCCEEDED"
    backend.close()
