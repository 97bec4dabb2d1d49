"""What following a Kubernetes job costs and leaves behind: a number of API requests set by the
job's changes, not by how long it runs, and a closed backend ending its watches and removing
its credentials."""

from __future__ import annotations

import contextlib
import json
import queue
import tempfile
import threading
import time
from pathlib import Path

import pytest

from contract.events import PREFIX
from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes.backend import KubernetesBackend
from runner.backends.kubernetes.follow.reflector import WatchConfig
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_watching import PENDING_CONDITIONS, Watching, states

pytestmark = pytest.mark.timeout(60)


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
