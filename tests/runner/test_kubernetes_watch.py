"""Following a Kubernetes job with watches (KubernetesBackend.watch and events) against the fake
API server: each change yielded once, state.json written only on a change, a finished run
answered from its record, a job deleted or cancelled under a watch, warning events asked for
only while the job is pending, and the pending timeout. Dropped connections, 410 Gone, backoff
and bookmarks are in test_kubernetes_watch_faults.py; the requests following costs and what
closing the backend leaves in test_kubernetes_watch_cost.py."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

import pytest

from contract.rundir import JobState, JobStatus, read_state
from runner.results import rundir
from tests.runner.k8s_helpers import RUN_ID, complete, iso, make_backend, make_spec, pod, submit
from tests.runner.k8s_watching import (
    PENDING_CONDITIONS,
    UNSCHEDULABLE,
    Watching,
    states,
    two_pending_pods,
)

pytestmark = pytest.mark.timeout(60)


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
