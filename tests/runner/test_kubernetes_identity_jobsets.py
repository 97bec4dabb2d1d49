"""A TrainJob's pods are those of its JobSet: the pods of an earlier TrainJob of the same name,
or of a JobSet another TrainJob controls, are not the run's; without JobSets a TrainJob has no
pods yet, and where JobSets are forbidden the pods made before the TrainJob are not its; a pod
without JobSet's uid label is told by its creation time, in status and in logs."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from contract.rundir import JobState
from runner.backends.kubernetes.follow.pods import PodOwner
from runner.backends.kubernetes.jobapis import JOB_KINDS
from runner.errors import RunnerError
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, recorded_uid, submit

TRAINJOB = JOB_KINDS["trainjob"]

pytestmark = pytest.mark.timeout(60)


# ---- a TrainJob's pods: those of its JobSet --------------------------------------------------

JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
WAITING = "waiting for the job controller to create the pods"


def leftover_pods(cluster: FakeCluster, created: str = "2030-01-01T00:00:05Z") -> None:
    """The running pods of an earlier TrainJob of the run's name, deleted, its pods still
    terminating: the same run-id label and completion indexes, made by that job's JobSet."""
    for node in (0, 1):
        made = pod("trainjob", RUN_ID, node, "Running")
        made["metadata"]["name"] += "-old"
        made["metadata"]["creationTimestamp"] = created
        made["metadata"]["ownerReferences"] = [
            {"kind": "Job", "uid": "uid-an-earlier-batch-job", "controller": True}
        ]
        made["metadata"]["labels"][JOBSET_UID] = "uid-an-earlier-jobset"
        cluster.add_pod(made, log=f"[rank{2 * node}]:a line of the earlier job\n")


def own_pods(cluster: FakeCluster) -> None:
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Running"), log=f"[rank{2 * node}]:mine\n")


def test_the_pods_of_an_earlier_trainjob_of_the_same_name_are_not_the_runs(cluster, tmp_path):
    """Their label is the run's, but their JobSet is not the TrainJob's: the run is pending
    until its own pods run, and none of their lines is its log."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec(nodes=2))
    leftover_pods(cluster)
    status = backend.status(handle)
    assert status.state is JobState.PENDING and status.reason == WAITING, status
    with pytest.raises(RunnerError, match="its pod has not started"):
        list(backend.logs(handle, 0, follow=False))
    assert next(backend.watch(handle)).state is JobState.PENDING
    own_pods(cluster)
    assert backend.status(handle).state is JobState.RUNNING
    assert list(backend.logs(handle, 0, follow=False)) == ["mine"]
    assert cluster.requests("GET", "/jobsets/") == 1  # once found, the JobSet is known
    backend.close()


def test_a_jobset_that_another_trainjob_controls_is_not_the_runs(cluster, tmp_path):
    """The JobSet of the run's name may still be an earlier TrainJob's (garbage collection
    takes a while): its pods are not the run's; the run's own JobSet, once made, is."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec(nodes=2))
    cluster.put_jobset(RUN_ID, "uid-an-earlier-trainjob")
    own_pods(cluster)  # labelled with that JobSet's uid, as it made them
    status = backend.status(handle)
    assert status.state is JobState.PENDING and status.reason == WAITING, status
    with pytest.raises(RunnerError, match="its pod has not started"):
        list(backend.logs(handle, 0, follow=False))
    cluster.remove_pods()
    cluster.put_jobset(RUN_ID, recorded_uid(run_dir))  # Trainer makes the run's own
    own_pods(cluster)
    assert backend.status(handle).state is JobState.RUNNING
    backend.close()


def test_without_jobsets_a_trainjob_has_no_pods_yet(tmp_path):
    cluster = FakeCluster(namespace="bench")
    try:
        cluster.emulator.make_jobsets = False  # Trainer has not made the JobSet yet
        backend = make_backend(cluster, tmp_path, "trainjob")
        handle, _ = submit(backend, tmp_path, make_spec(nodes=2))
        leftover_pods(cluster)
        assert backend.status(handle).reason == WAITING
        backend.close()
    finally:
        cluster.close()


def test_where_jobsets_are_forbidden_pods_made_before_the_trainjob_are_not_its(
    cluster, tmp_path, caplog
):
    """RBAC may forbid reading JobSets: the runner says once which permission it lacks, and
    tells the pods apart by time only."""
    cluster.fail("GET", "/jobsets/", 403, times=100, message="jobsets is forbidden")
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec(nodes=2))
    leftover_pods(cluster, created="2029-12-31T23:59:00Z")  # before the run's job was made
    with caplog.at_level("WARNING"):
        assert backend.status(handle).reason == WAITING
        with pytest.raises(RunnerError, match="its pod has not started"):
            list(backend.logs(handle, 0, follow=False))
        own_pods(cluster)
        assert backend.status(handle).state is JobState.RUNNING
        assert list(backend.logs(handle, 0, follow=False)) == ["mine"]
    said = [r.getMessage() for r in caplog.records if "get jobsets.jobset.x-k8s.io" in r.message]
    assert len(said) == 1 and "\n" not in said[0], said
    assert cluster.requests("GET", "/jobsets/") == 1  # forbidden once: not asked again
    backend.close()


def test_a_followed_trainjob_log_is_never_an_earlier_jobs(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec(nodes=2))
    leftover_pods(cluster)
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(backend.logs(handle, 0, follow=True)))
    follower.start()
    for node in (0, 1):
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Succeeded"), log=f"[rank{2 * node}]:mine\n")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    follower.join(timeout=30)
    assert not follower.is_alive() and lines == ["mine"], lines
    backend.close()


def _jobset_pod(created: str, jobset_uid: str | None) -> dict[str, Any]:
    labels = {"jobset.sigs.k8s.io/jobset-name": RUN_ID}
    if jobset_uid is not None:
        labels["jobset.sigs.k8s.io/jobset-uid"] = jobset_uid
    return {"metadata": {"name": "p", "labels": labels, "creationTimestamp": created}}


def test_a_trainjob_pod_without_jobsets_uid_label_is_told_by_its_creation_time():
    # JobSet before v0.9 (Kubeflow Trainer 2.0 ships 0.8) labels pods with its name only: such
    # a cluster's pods are the job's when made after it, never none of them.
    owner = PodOwner("job-uid", jobset=(RUN_ID, "js-uid"), not_before="2030-01-01T00:00:05Z")
    assert owner.owns(TRAINJOB, _jobset_pod("2030-01-01T00:00:06Z", None))
    assert not owner.owns(TRAINJOB, _jobset_pod("2030-01-01T00:00:04Z", None))
    # Where the label is there, the uid alone decides.
    assert owner.owns(TRAINJOB, _jobset_pod("2030-01-01T00:00:04Z", "js-uid"))
    assert not owner.owns(TRAINJOB, _jobset_pod("2030-01-01T00:00:06Z", "old-js-uid"))
    # Another JobSet's name, or none found yet: never the job's.
    assert not PodOwner("job-uid", jobset=("other", "js-uid")).owns(
        TRAINJOB, _jobset_pod("2030-01-01T00:00:06Z", "js-uid")
    )
    assert not PodOwner("job-uid", jobset=(RUN_ID, None)).owns(
        TRAINJOB, _jobset_pod("2030-01-01T00:00:06Z", None)
    )


def test_logs_of_a_new_command_tell_pods_without_jobsets_uid_label_by_time(
    cluster, tmp_path, monkeypatch
):
    """JobSet before v0.9 labels pods with its name only: `runner logs` in a command of its own
    (a backend that has read no status yet) must tell an earlier TrainJob's leftover pods from
    the run's by their creation time, as status does."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec(nodes=2))
    backend.close()
    with monkeypatch.context() as patched:  # JobSet 0.8: no uid label on the pods it makes
        patched.setattr(cluster.emulator, "jobset", lambda namespace, name: None)
        for node in (0, 1):  # an earlier TrainJob's, made before the run's, still terminating
            made = pod("trainjob", RUN_ID, node, "Running")
            made["metadata"]["name"] += "-old"
            made["metadata"]["creationTimestamp"] = "2029-12-31T23:59:00Z"
            cluster.add_pod(made, log=f"[rank{2 * node}]:a line of the earlier job\n")
    fresh = make_backend(cluster, tmp_path, "trainjob")
    with pytest.raises(RunnerError, match="its pod has not started"):
        list(fresh.logs(handle, 0, follow=False))
    assert fresh.status(handle).reason == WAITING
    fresh.close()
