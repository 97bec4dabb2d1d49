"""KubernetesBackend against a fake API server (kmock) through the official kubernetes client:
the protocol (dryrun, submit, handle), status for both job APIs (a success the pods do not bear
out, a deadline, a failed node), pending reasons and timeout, cancel, and reconnecting from
job.json. Logs are in test_kubernetes_logs.py, fetch in test_kubernetes_fetch.py, watching in
test_kubernetes_watch.py, the API's failures in test_kubernetes_errors.py, hostile stores, logs
and objects in test_kubernetes_hostile*.py."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import yaml

from contract.rundir import JobState, read_state
from runner.backends.kubernetes.backend import KubernetesBackend, from_handle
from runner.errors import RunnerError, SpecError
from runner.job.spec import Placement, resolve
from runner.results import rundir
from tests.runner.k8s_helpers import (
    RUN_ID,
    iso,
    make_backend,
    make_spec,
    pod,
    stack_connection,
    submit,
)
from tests.runner.k8s_runlogs import APIS, SUCCESS, UNSCHEDULABLE, pod_log, rank0_stdout, run_pods

pytestmark = pytest.mark.timeout(60)


# ---- submit and status ---------------------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_submit_creates_exactly_the_dry_run_manifest_under_the_handle_known_before(
    cluster, tmp_path, job_api
):
    backend = make_backend(cluster, tmp_path, job_api)
    request = backend.dryrun(make_spec(), tmp_path / RUN_ID)
    assert yaml.safe_load(backend.describe(request)) == request.manifest  # what --dry-run prints
    handle = backend.handle(request)
    assert handle == f"k8s://bench/{RUN_ID}"
    assert cluster.requests() == 0  # nothing asked of the cluster before submit
    assert backend.submit(request) == handle
    job = cluster.job(job_api, RUN_ID)
    created = {k: v for k, v in job.items() if k != "metadata"}
    assert created == {k: v for k, v in request.manifest.items() if k != "metadata"}
    assert job["metadata"]["labels"] == request.manifest["metadata"]["labels"]


def test_dryrun_refuses_what_the_cluster_cannot_run_before_anything_starts(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    with pytest.raises(SpecError, match="4 nodes, 5 asked"):
        backend.dryrun(make_spec(nodes=5), tmp_path)
    assert cluster.requests() == 0


@pytest.mark.parametrize("timeout_s", [0, -5.0])
def test_a_pending_timeout_that_is_not_positive_is_refused_where_it_enters(tmp_path, timeout_s):
    with pytest.raises(SpecError) as err:
        KubernetesBackend(stack_connection(), results_root=tmp_path, pending_timeout_s=timeout_s)
    assert err.value.param == "--pending-timeout"


@pytest.mark.parametrize("job_api", APIS)
def test_status_follows_the_job_from_pending_to_running_to_succeeded(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    pending = backend.status(handle)
    assert pending.state is JobState.PENDING
    assert "create the pods" in pending.reason
    assert pending.since == "2030-01-01T00:00:00Z"
    run_pods(cluster, job_api)
    assert backend.status(handle).state is JobState.RUNNING
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert backend.status(handle).state is JobState.SUCCEEDED
    assert read_state(run_dir).state is JobState.SUCCEEDED


@pytest.mark.parametrize("job_api", APIS)
def test_status_explains_a_failure_with_the_exit_code(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, _ = submit(backend, tmp_path, make_spec())
    container = "node" if job_api == "trainjob" else "pytorch"
    terminated = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    statuses = [{"name": container, "restartCount": 0, "state": terminated}]
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Failed", containerStatuses=statuses), log="")
    cluster.set_job_condition(job_api, RUN_ID, "Failed", "job failed: node 1")
    status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert status.exit_code == 137
    assert "node 1" in status.reason and "OOMKilled" in status.reason


def _success_with_a_worker_running(cluster, tmp_path, now: list[datetime]):
    """A PyTorchJob its operator calls Succeeded (at 2030-01-01T00:10:00) once its Master's pod
    succeeded, its Worker's still running; the backend's clock reads now[0]."""
    backend = make_backend(cluster, tmp_path, "pytorchjob", clock=lambda: now[0])
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(
        pod("pytorchjob", RUN_ID, 0, "Succeeded"), log=pod_log(range(2), rank0_stdout())
    )
    cluster.add_pod(pod("pytorchjob", RUN_ID, 1, "Running"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded")
    return backend, handle, run_dir


def test_a_pytorchjob_that_reports_success_while_a_worker_runs_waits_for_the_worker(
    cluster, tmp_path
):
    """training-operator 1.9 marks a PyTorchJob Succeeded once its Master succeeds, with its
    Worker still running: the run is not over until the Worker's pod has ended, and its end
    decides the run. A SUCCEEDED record then would be final, and fetch would delete the job,
    the Worker with it, whatever it was about to do."""
    now = [datetime.fromisoformat("2030-01-01T00:10:30+00:00")]  # 30 s after the condition
    backend, handle, run_dir = _success_with_a_worker_running(cluster, tmp_path, now)
    waiting = backend.status(handle)
    assert waiting.state is JobState.RUNNING
    assert f"waiting for node 1 (pod {RUN_ID}-worker-0) to end" in waiting.reason
    backend.fetch(handle, run_dir)  # every file is there, but the Worker has not ended
    assert cluster.job("pytorchjob", RUN_ID) is not None and read_state(run_dir) == waiting
    cluster.add_pod(pod("pytorchjob", RUN_ID, 1, "Failed"), log=pod_log(range(2, 4), ""))
    status = backend.status(handle)
    assert status.state is JobState.FAILED and status.exit_code == 1
    assert "node 1" in status.reason and read_state(run_dir) == status


def test_a_worker_that_never_ends_after_the_job_reports_success_fails_the_run(cluster, tmp_path):
    """The operator calls the job finished, so its deadline no longer stops the hung Worker:
    after a grace the run is FAILED, which lets fetch and cancel clean up."""
    now = [datetime.fromisoformat("2030-01-01T00:10:30+00:00")]  # 30 s after the condition
    backend, handle, run_dir = _success_with_a_worker_running(cluster, tmp_path, now)
    assert backend.status(handle).state is JobState.RUNNING
    now[0] = datetime.fromisoformat("2030-01-01T00:15:00+00:00")  # 300 s after the condition
    status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert status.reason == (
        f"the job reports success, but node 1 (pod {RUN_ID}-worker-0) had not ended 300 s later"
    )
    assert read_state(run_dir) == status


def test_cancel_stops_a_worker_that_runs_on_after_the_job_reports_success(cluster, tmp_path):
    """The run is not over while its Worker runs (above): `runner cancel` must stop it, not
    take the operator's Succeeded for the run's end and leave the Worker running."""
    now = [datetime.fromisoformat("2030-01-01T00:10:30+00:00")]  # 30 s after the condition
    backend, handle, run_dir = _success_with_a_worker_running(cluster, tmp_path, now)
    assert backend.status(handle).state is JobState.RUNNING
    backend.cancel(handle)
    assert cluster.job("pytorchjob", RUN_ID) is None
    assert read_state(run_dir).state is JobState.CANCELLED


# What each controller says when a job outlives its activeDeadlineSeconds: Kubeflow Trainer 2.3
# (trainjob_controller.go, reconcileDeadline, which then deletes the JobSet) and
# training-operator 1.9 (common/job.go, ReconcileJobs, which then deletes the pods).
DEADLINE_CONDITIONS = {
    "trainjob": {"reason": "DeadlineExceeded", "message": "TrainJob exceeded its active deadline"},
    "pytorchjob": {
        "reason": "PyTorchJobFailed",
        "message": f"Job {RUN_ID} has failed because it was active longer than specified deadline",
    },
}


@pytest.mark.parametrize("job_api", APIS)
def test_a_hung_run_that_the_cluster_stops_at_its_deadline_says_so_in_one_line(
    cluster, tmp_path, job_api
):
    """A run whose ranks stop making progress ends at its activeDeadlineSeconds (its time budget
    plus slack): FAILED, saying which deadline stopped it and how to give a run longer, not
    blaming the SIGTERM that the deadline sent the processes as if a rank had crashed."""
    backend = make_backend(cluster, tmp_path, job_api)
    placement = Placement(num_nodes=2, procs_per_node=2, device="cuda")
    spec = resolve("cnn-digits", ["time_budget_s=600"], placement, run_id=RUN_ID)
    handle, run_dir = submit(backend, tmp_path, spec)
    run_pods(cluster, job_api)
    assert backend.status(handle).state is JobState.RUNNING
    condition = {"type": "Failed", "status": "True", **DEADLINE_CONDITIONS[job_api],
                 "lastTransitionTime": iso(2400)}  # fmt: skip
    cluster.patch_job(job_api, RUN_ID, {"status": {"conditions": [condition]}})
    container = "node" if job_api == "trainjob" else "pytorch"
    killed = {"terminated": {"exitCode": 143, "reason": "Error"}}
    for node in (0, 1):
        statuses = [{"name": container, "restartCount": 0, "state": killed}]
        cluster.add_pod(pod(job_api, RUN_ID, node, "Failed", containerStatuses=statuses), log="")
    status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert "\n" not in status.reason
    assert "activeDeadlineSeconds 2400 s" in status.reason
    assert "--set time_budget_s=" in status.reason
    assert "exited with code 143" not in status.reason and status.exit_code is None
    assert read_state(run_dir) == status


@pytest.mark.parametrize("job_api", APIS)
def test_a_job_that_reports_success_while_a_node_failed_is_failed(cluster, tmp_path, job_api):
    """training-operator 1.9 marks a PyTorchJob Succeeded once its Master succeeds, whatever a
    Worker did (observe._succeeded cites the code): the pods, not the condition, say whether
    every process exited 0, so the record never reads SUCCEEDED, not even after a fetch."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Succeeded"), log=pod_log(range(2), rank0_stdout()))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Failed"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    status = backend.status(handle)
    assert status.state is JobState.FAILED and status.exit_code == 1
    assert "reports success, but node 1 (pod " in status.reason
    assert "exited with code 1 (Error)" in status.reason
    assert [s.state for s in backend.watch(handle)] == [JobState.FAILED]
    backend.fetch(handle, run_dir)
    assert read_state(run_dir) == status


def test_pending_reason_is_the_schedulers_message(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": UNSCHEDULABLE}]  # fmt: skip
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Pending", conditions=conditions))
    status = backend.status(handle)
    assert status.state is JobState.PENDING
    assert UNSCHEDULABLE in status.reason


def test_pending_reason_names_an_image_pull_failure(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "manifest unknown"}}
    statuses = [{"name": "pytorch", "restartCount": 0, "state": waiting}]
    cluster.add_pod(pod("pytorchjob", RUN_ID, 0, "Pending", containerStatuses=statuses))
    reason = backend.status(handle).reason
    assert "ImagePullBackOff" in reason and "manifest unknown" in reason


def test_pending_reason_reports_a_quota_event(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    quota = 'pods "x" is forbidden: exceeded quota: gpu-quota, requested: nvidia.com/gpu=2'
    cluster.add_event({
        "metadata": {"name": "ev1", "namespace": "bench"}, "type": "Warning",
        "reason": "FailedCreate", "message": quota, "lastTimestamp": iso(30),
        "involvedObject": {"kind": "Job", "name": f"{RUN_ID}-node-0"},
    })  # fmt: skip
    cluster.add_event({
        "metadata": {"name": "ev2", "namespace": "bench"}, "type": "Warning",
        "reason": "BackOff", "message": "someone else's", "lastTimestamp": iso(40),
        "involvedObject": {"kind": "Pod", "name": "other-run-pod"},
    })  # fmt: skip
    reason = backend.status(handle).reason
    assert "FailedCreate" in reason and "exceeded quota" in reason


def test_pending_timeout_cancels_the_job_and_reports_why(cluster, tmp_path):
    clock = lambda: datetime.fromisoformat("2030-01-01T00:11:40+00:00")  # noqa: E731
    backend = make_backend(cluster, tmp_path, "trainjob", pending_timeout_s=600, clock=clock)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    conditions = [{"type": "PodScheduled", "status": "False", "message": UNSCHEDULABLE}]
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Pending", conditions=conditions))
    status = backend.status(handle)
    assert status.state is JobState.CANCELLED
    assert "pending for 700 s" in status.reason and "--pending-timeout 600" in status.reason
    assert UNSCHEDULABLE in status.reason
    assert cluster.job("trainjob", RUN_ID) is None
    # The job is gone; its run directory remembers why.
    assert backend.status(handle).reason == status.reason
    assert read_state(run_dir).state is JobState.CANCELLED


def test_pending_within_the_timeout_stays_pending(cluster, tmp_path):
    clock = lambda: datetime.fromisoformat("2030-01-01T00:05:00+00:00")  # noqa: E731
    backend = make_backend(cluster, tmp_path, "trainjob", pending_timeout_s=600, clock=clock)
    handle, _ = submit(backend, tmp_path, make_spec())
    assert backend.status(handle).state is JobState.PENDING
    assert cluster.job("trainjob", RUN_ID) is not None


# ---- cancel --------------------------------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_cancel_deletes_the_job_and_is_idempotent(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    backend.cancel(handle)
    backend.cancel(handle)
    assert cluster.job(job_api, RUN_ID) is None
    assert backend.status(handle).state is JobState.CANCELLED
    assert read_state(run_dir).state is JobState.CANCELLED


def test_cancel_leaves_a_finished_job_for_fetch(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "trainjob", "Succeeded")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    backend.cancel(handle)
    assert cluster.job("trainjob", RUN_ID) is not None
    assert backend.status(handle).state is JobState.SUCCEEDED


def test_from_handle_reconnects_through_job_json(cluster, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.kubeconfig())
    from runner.backends.kubernetes.connection import connect

    conn = connect(kubeconfig=kubeconfig, image="repo/train:1.0")
    backend = KubernetesBackend(conn, results_root=tmp_path, pending_timeout_s=30)
    handle, _ = submit(backend, tmp_path, make_spec(device="cpu"))
    again = from_handle(handle, tmp_path)
    assert again.pending_timeout_s == 30
    assert again.status(handle).state is JobState.PENDING
    again.close()


def test_from_handle_refuses_a_damaged_pending_timeout_in_job_json(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    record = json.loads((run_dir / rundir.JOB).read_text())
    record["cluster"]["pending_timeout_s"] = "600; rm -rf /"
    (run_dir / rundir.JOB).write_text(json.dumps(record))
    with pytest.raises(RunnerError, match="pending_timeout_s that is not a positive number"):
        from_handle(handle, tmp_path)


@pytest.mark.parametrize(
    ("key", "value"),
    [("stack", ["gke-gpu-8"]), ("kubeconfig", 5), ("job_api", {"x": 1}), ("image", 7)],
)
def test_from_handle_refuses_a_damaged_cluster_reference_in_job_json(cluster, tmp_path, key, value):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    record = json.loads((run_dir / rundir.JOB).read_text())
    record["cluster"][key] = value
    (run_dir / rundir.JOB).write_text(json.dumps(record))
    with pytest.raises(RunnerError, match=rf"job.json has a cluster.{key} that is not text"):
        from_handle(handle, tmp_path)
