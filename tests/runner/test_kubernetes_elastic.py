"""An elastic PyTorchJob (--workers MIN:MAX) on the fake API server: its state comes from its
Worker pods, not from training-operator 1.9's conditions, which say Failed at the first failed
Worker and Succeeded at the first succeeded one (observe.elastic_end cites the code). The
conditions set here are the ones the operator sets, with its own messages."""

from __future__ import annotations

import io
from typing import Any

import pytest

from contract import events as keys
from contract.rundir import JobState, rank_log, read_state
from runner.errors import RunnerError
from runner.job.spec import JobSpec, Placement, resolve
from runner.results import rundir
from tests.runner.k8s_helpers import RUN_ID, make_backend, pod, submit
from tests.runner.rundirs import env_manifest
from tests.runner.rundirs import summary as summary_record
from workloads.telemetry import mllog

pytestmark = pytest.mark.timeout(60)
OPERATOR_FAILED = f"PyTorchJob {RUN_ID} is failed because 1 Worker replica(s) failed."
OOM_KILLED = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}


def elastic_spec(low: int = 2, high: int = 3) -> JobSpec:
    placement = Placement(num_nodes=high, procs_per_node=1, device="cuda", min_workers=low)
    return resolve("cnn-digits", ["seed=7", "strategy=allreduce"], placement, run_id=RUN_ID)


def worker(index: int, phase: str, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """Worker pod `index` as the operator names and labels it (no Master in an elastic job)."""
    made = pod("pytorchjob", RUN_ID, index + 1, phase)
    made["metadata"]["name"] = f"{RUN_ID}-worker-{index}"
    if state is not None:
        made["status"]["containerStatuses"][0]["state"] = state
    return made


def writer_log(world_at_end: int) -> str:
    """Worker 0's log: the run's events, its summary saying the world at the end."""
    out = io.StringIO()
    events = mllog.EventLog(None, echo=out)
    events.point(keys.MANIFEST, env_manifest(RUN_ID, 3, image="img", seed=7))
    events.start(keys.RUN_START)
    events.end(keys.RUN_STOP, status="success")
    events.point(keys.SUMMARY, summary_record(RUN_ID, world_at_end, 12.5, steps=100))
    events.close()
    return out.getvalue()


def test_a_worker_that_left_does_not_end_the_run_while_the_others_train(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, elastic_spec())
    for index in (0, 1):
        cluster.add_pod(worker(index, "Running"), log="")
    cluster.add_pod(worker(2, "Failed", OOM_KILLED), log="")
    cluster.set_job_condition("pytorchjob", RUN_ID, "Failed", OPERATOR_FAILED)
    assert backend.status(handle).state is JobState.RUNNING
    backend.cancel(handle)  # the operator's Failed does not make a running run look finished
    assert cluster.job("pytorchjob", RUN_ID) is None
    assert backend.status(handle).state is JobState.CANCELLED


def test_an_elastic_run_that_lost_a_worker_succeeds_naming_the_pod_that_left(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, elastic_spec(2, 3))
    cluster.add_pod(worker(2, "Failed", OOM_KILLED), log="worker 2 training\n")
    cluster.set_job_condition("pytorchjob", RUN_ID, "Failed", OPERATOR_FAILED)
    cluster.add_pod(worker(0, "Succeeded"), log=writer_log(world_at_end=2))
    cluster.add_pod(worker(1, "Succeeded"), log="worker 1 done\n")
    status = backend.status(handle)
    assert status.state is JobState.SUCCEEDED
    assert status.reason == (
        f"finished with 2 of 3 workers (pod {RUN_ID}-worker-2 exited with code 137 (OOMKilled))"
    )
    assert read_state(run_dir) == status
    # Its summary (the world at the end: 2 of the 3 started) is the run's, not refused.
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).world_size == 2
    assert rank_log(run_dir, 2).read_text() == "worker 2 training\n"


def test_an_elastic_run_left_below_its_minimum_fails_naming_the_pods_that_left(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, elastic_spec(2, 3))
    cluster.add_pod(worker(0, "Succeeded"), log=writer_log(world_at_end=1))
    cluster.add_pod(worker(1, "Failed"), log="")
    cluster.add_pod(worker(2, "Failed", OOM_KILLED), log="")
    # What 1.9 says of it: Succeeded, since one Worker (of an elastic job) succeeded.
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded", "successfully completed")
    status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert status.reason == (
        "1 worker(s) finished; the run needs at least 2 "
        f"(pod {RUN_ID}-worker-1 exited with code 1 (Error); "
        f"pod {RUN_ID}-worker-2 exited with code 137 (OOMKilled))"
    )
    assert status.exit_code == 1


def test_an_elastic_run_whose_worker_0_failed_fails_though_others_succeeded(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, elastic_spec(2, 3))
    cluster.add_pod(worker(0, "Failed", OOM_KILLED), log="")
    for index in (1, 2):
        cluster.add_pod(worker(index, "Succeeded"), log="")
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded", "successfully completed")
    status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert status.reason.startswith("worker 0, which hosts the store and writes the run's record")
    assert f"pod {RUN_ID}-worker-0 exited with code 137 (OOMKilled)" in status.reason
    assert status.exit_code == 137


def test_an_elastic_run_is_not_over_while_a_worker_still_trains_after_worker_0(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, elastic_spec(2, 3))
    cluster.add_pod(worker(0, "Succeeded"), log=writer_log(world_at_end=3))
    cluster.add_pod(worker(1, "Succeeded"), log="")
    cluster.add_pod(worker(2, "Running"), log="")
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded", "successfully completed")
    assert backend.status(handle).state is JobState.RUNNING
    cluster.add_pod(worker(2, "Succeeded"), log="")
    status = backend.status(handle)
    assert status.state is JobState.SUCCEEDED and status.reason == ""


def test_an_elastic_job_whose_pods_the_operator_deleted_reports_its_condition(cluster, tmp_path):
    """Past activeDeadlineSeconds the operator deletes the pods and says why."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, elastic_spec(2, 3))
    deadline = f"Job {RUN_ID} has failed because it was active longer than specified deadline"
    cluster.set_job_condition("pytorchjob", RUN_ID, "Failed", deadline)
    status = backend.status(handle)
    assert status.state is JobState.FAILED and status.reason.startswith(deadline)
    # An elastic run has a time budget as a fixed one does: the note says how to get longer.
    assert (
        "activeDeadlineSeconds 21600 s: the run's time_budget_s + 1800 s, or 6 h without one"
        in status.reason
    )
    assert "--set time_budget_s=SECONDS" in status.reason


def test_join_is_refused_without_touching_the_job_the_operator_would_not_grow(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, elastic_spec(2, 3))
    before = cluster.requests()
    with pytest.raises(RunnerError, match="creates no pod for a job it has marked Failed"):
        backend.join(handle)
    assert cluster.requests() == before  # no PATCH of the replicas, nothing asked at all
    assert (
        cluster.job("pytorchjob", RUN_ID)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    )
