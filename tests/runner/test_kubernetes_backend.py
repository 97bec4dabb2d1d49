"""KubernetesBackend against a fake API server (kmock) through the official kubernetes client:
the protocol (dryrun, describe, handle, submit), status, logs, fetch and cancel for both job APIs,
pending reasons and timeout. Watching is in test_kubernetes_watch.py, the API's failures in
test_kubernetes_errors.py, hostile logs and stores in test_kubernetes_hostile.py."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from contract import events as keys
from contract import files
from contract.rundir import JobState, rank_log, read_state
from runner.backends.kubernetes.backend import KubernetesBackend, from_handle
from runner.errors import RunnerError, SpecError
from runner.job.spec import Placement, resolve
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import (
    RUN_ID,
    iso,
    make_backend,
    make_spec,
    pod,
    stack_connection,
    submit,
)
from tests.runner.rundirs import env_manifest
from tests.runner.rundirs import summary as summary_record
from workloads.telemetry import mllog

pytestmark = pytest.mark.timeout(60)
APIS = ["trainjob", "pytorchjob"]
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(namespace="bench")
    yield fake
    fake.close()


MANIFEST = env_manifest(RUN_ID, 4, image="img", seed=7)
SUMMARY = summary_record(RUN_ID, 4, 12.5, steps=100) | {"run_time_s": 30.0}


def rank0_stdout(run_dir: Path | None = None) -> str:
    """What rank 0 prints (and, given run_dir, writes as a local run does), via mllog itself."""
    out = io.StringIO()
    events = mllog.EventLog(str(run_dir / rundir.EVENTS) if run_dir else None, echo=out)
    events.point(keys.SUBMISSION_BENCHMARK, "cnn-digits")
    events.point(keys.MANIFEST, MANIFEST)
    events.start(keys.RUN_START)
    events.point(keys.EVAL_ACCURACY, 0.96, epoch_num=3)
    events.end(keys.RUN_STOP, status="success")
    events.point(keys.SUMMARY, SUMMARY)
    events.close()
    return "starting torchrun\n" + out.getvalue()


def pod_log(ranks: range, rank0: str) -> str:
    """One pod's log: torchrun's own line, then each rank's lines with torchrun's prefix."""
    lines = ["launcher: starting workers"]
    for rank in ranks:
        text = rank0 if rank == 0 else f"rank {rank} training\nrank {rank} done\n"
        lines += [f"[rank{rank}]:{line}" for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def run_pods(cluster: FakeCluster, job_api: str, phase: str = "Running") -> None:
    """Two nodes with two ranks each, as the controller and kubelet would show them."""
    for node in (0, 1):
        ranks = range(node * 2, node * 2 + 2)
        cluster.add_pod(pod(job_api, RUN_ID, node, phase), log=pod_log(ranks, rank0_stdout()))


SUCCESS = {"trainjob": "Complete", "pytorchjob": "Succeeded"}


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


# ---- logs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_logs_split_a_pods_output_by_rank(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, _ = submit(backend, tmp_path, make_spec())
    run_pods(cluster, job_api)
    assert list(backend.logs(handle, 3, follow=False)) == ["rank 3 training", "rank 3 done"]
    rank0 = list(backend.logs(handle, 0, follow=False))
    assert rank0[0] == "starting torchrun"
    assert any(line.startswith(keys.PREFIX) for line in rank0)
    # torchrun's own lines (unprefixed) are no rank's.
    assert "launcher: starting workers" not in rank0


def test_logs_follow_waits_for_the_pod_and_streams_a_restarted_container_too(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    first = pod("pytorchjob", RUN_ID, 1)
    pod_name = first["metadata"]["name"]
    lines = backend.logs(handle, 2, follow=True)
    threading.Timer(0.1, cluster.add_pod, (first, "[rank2]:epoch 1\n[rank3]:other\n")).start()
    assert next(lines) == "epoch 1"  # the pod came, its log is streamed as it grows
    cluster.append_log(pod_name, "[rank2]:epoch 2\n")
    assert next(lines) == "epoch 2"
    # The container restarts (a new run of it, new log), and the job then ends.
    restarted = pod("pytorchjob", RUN_ID, 1, "Succeeded")
    restarted["status"]["containerStatuses"][0]["restartCount"] = 1
    cluster.add_pod(restarted, log="[rank2]:resumed\n[rank2]:finished\n")
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded")
    assert list(lines) == ["resumed", "finished"]


def test_logs_follow_reads_a_container_restarted_after_what_the_pods_watch_showed(
    cluster, tmp_path
):
    """The job's watch says it is over while the pods' watch still shows the container's
    previous run: the follower asks for the pods themselves and reads the last run too."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod("pytorchjob", RUN_ID, 1), "[rank2]:epoch 1\n")
    lines = backend.logs(handle, 2, follow=True)
    assert next(lines) == "epoch 1"
    restarted = pod("pytorchjob", RUN_ID, 1, "Succeeded")
    restarted["status"]["containerStatuses"][0]["restartCount"] = 1
    cluster.add_pod(restarted, log="[rank2]:resumed\n[rank2]:finished\n", watched=False)
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded")
    assert list(lines) == ["resumed", "finished"]


def test_logs_follow_waits_out_a_container_not_ready_to_be_read(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.fail("get", r"/log$", 400, times=2, message='container "node" is waiting to start')
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Succeeded"), log="[rank0]:hello\n")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert list(backend.logs(handle, 0, follow=True)) == ["hello"]
    assert cluster.requests("get", r"/log$") == 3


def test_logs_of_an_elastic_job_count_its_worker_only_pods_from_zero(cluster, tmp_path):
    """An elastic PyTorchJob has Worker replicas only (no Master), each pod one worker run
    directly (no torchrun, so no rank prefix): worker i is rank i, every line its own."""
    placement = Placement(num_nodes=3, procs_per_node=1, device="cuda", min_workers=2)
    spec = resolve("cnn-digits", ["seed=7", "strategy=allreduce"], placement, run_id=RUN_ID)
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, spec)
    assert "Master" not in cluster.job("pytorchjob", RUN_ID)["spec"]["pytorchReplicaSpecs"]
    for index in range(3):
        worker = pod("pytorchjob", RUN_ID, index + 1)  # a Worker pod, replica index `index`
        worker["metadata"]["name"] = f"{RUN_ID}-worker-{index}"
        cluster.add_pod(worker, log=f"worker {index} training\nworker {index} done\n")
    for rank in range(3):
        lines = list(backend.logs(handle, rank, follow=False))
        assert lines == [f"worker {rank} training", f"worker {rank} done"]


def test_logs_refuse_a_rank_outside_the_job(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    with pytest.raises(RunnerError, match="4 ranks"):
        list(backend.logs(handle, 4, follow=False))


@pytest.mark.parametrize("follow", [False, True])
def test_logs_of_a_finished_run_that_has_none_say_why_followed_or_not(cluster, tmp_path, follow):
    """A run cancelled before its pods started has no log, and never will: `--follow` says so
    as plainly as a single read, rather than printing nothing and succeeding."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    backend.cancel(handle)
    with pytest.raises(RunnerError, match=r"no log of rank 0 .* the run is CANCELLED"):
        list(backend.logs(handle, 0, follow=follow))


# ---- fetch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("job_api", APIS)
def test_fetch_rebuilds_results_from_rank0_log_and_deletes_the_job(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert backend.fetch(handle, run_dir) == []
    assert rundir.read_summary(run_dir).to_dict() == SUMMARY
    assert files.read_json(run_dir / rundir.MANIFEST) == MANIFEST
    logged = [e["key"] for e in keys.read_events(run_dir / rundir.EVENTS)]
    assert logged.count(keys.RUN_START) == 1 and keys.RUN_STOP in logged
    assert rank_log(run_dir, 3).read_text() == "rank 3 training\nrank 3 done\n"
    # torchrun's own lines (unprefixed) are no rank's: they are kept beside, per node.
    assert rank_log(run_dir, 2).read_text() == "rank 2 training\nrank 2 done\n"
    launcher = (run_dir / "logs" / "node-1.unattributed.log").read_text()
    assert launcher == "launcher: starting workers\n"
    assert read_state(run_dir).state is JobState.SUCCEEDED
    assert cluster.job(job_api, RUN_ID) is None  # TrainJob has no TTL: fetch cleans up


def test_a_fetch_that_cannot_write_into_the_run_directory_is_one_line(
    cluster, tmp_path, monkeypatch
):
    """A logs/ folder planted as a link (or a full disk) refuses the fetch's writes: `runner
    fetch` says so in one line naming the path, never through the link, never a traceback."""
    from click.testing import CliRunner

    from runner import api
    from runner.cli import main

    backend = make_backend(cluster, tmp_path, "pytorchjob")
    _, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "pytorchjob", phase="Succeeded")
    cluster.set_job_condition("pytorchjob", RUN_ID, SUCCESS["pytorchjob"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "logs").rmdir()
    (run_dir / "logs").symlink_to(elsewhere)
    monkeypatch.setattr(api, "backend_for", lambda *args, **kwargs: backend)
    result = CliRunner().invoke(main, ["--results-dir", str(run_dir.parent), "fetch", RUN_ID])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert f"cannot write {run_dir / 'logs'}: is a symbolic link" in result.output
    assert list(elsewhere.iterdir()) == []


def test_a_status_the_run_directory_cannot_record_is_one_line_naming_it(cluster, tmp_path):
    """`runner status` records what it saw in state.json: a disk that refuses (here a folder
    where the file goes) is a one-line error naming the path, not an OSError's traceback."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "pytorchjob", phase="Running")
    (run_dir / "state.json").unlink()
    (run_dir / "state.json").mkdir()
    with pytest.raises(RunnerError, match=r"cannot write .*state\.json"):
        backend.status(handle)
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_a_complete_run_fetched_again_is_still_complete(cluster, tmp_path, job_api):
    """The first fetch deleted the job; a second (`runner fetch` twice, or after a TTL) has
    nothing to delete and nothing missing, and says so rather than fail on the delete."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert backend.fetch(handle, run_dir) == []
    assert cluster.job(job_api, RUN_ID) is None
    assert backend.fetch(handle, run_dir) == []
    assert read_state(run_dir).state is JobState.SUCCEEDED


DIVERGED = "diverged at epoch 1, step 3: loss nan"


@pytest.mark.parametrize(
    ("rank0", "reason"),
    [
        ("training\ndone\n", "every process exited 0, but rank 0 wrote no usable summary.json"),
        (
            rank0_stdout().replace('"diverged": null', f'"diverged": "{DIVERGED}"'),
            DIVERGED,
        ),
    ],
    ids=["no-summary", "diverged"],
)
@pytest.mark.parametrize("job_api", APIS)
def test_a_job_that_succeeded_without_a_good_summary_is_a_failed_run(
    cluster, tmp_path, job_api, rank0, reason
):
    """As a local run, a run succeeded only if rank 0 wrote its summary, and not one that says
    it diverged: the job's word is recorded only until fetch has read rank 0's whole log."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Succeeded"), log=pod_log(range(2), rank0))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert [s.state for s in backend.watch(handle)] == [JobState.SUCCEEDED]
    backend.fetch(handle, run_dir)
    recorded = read_state(run_dir)
    assert recorded is not None
    assert (recorded.state, recorded.reason, recorded.failed_rank) == (JobState.FAILED, reason, 0)
    assert backend.status(handle) == recorded


@pytest.mark.parametrize("job_api", APIS)
def test_a_fetch_again_once_the_pods_are_gone_keeps_the_failed_verdict(cluster, tmp_path, job_api):
    """The first fetch read rank 0's whole log and found no summary: FAILED. A later fetch
    that cannot read it (the pods deleted) has no ground to overturn that into the job's
    SUCCEEDED."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Succeeded"), log=pod_log(range(2), "done\n"))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    backend.fetch(handle, run_dir)
    first = read_state(run_dir)
    assert first is not None and first.state is JobState.FAILED
    cluster.remove_pods()
    with pytest.raises(RunnerError, match="its pods are gone"):
        backend.fetch(handle, run_dir)
    assert read_state(run_dir) == first
    assert backend.status(handle) == first


@pytest.mark.parametrize("job_api", APIS)
def test_a_fetch_once_the_pods_are_gone_keeps_the_failure_cause_status_saw(
    cluster, tmp_path, job_api
):
    """status read which node failed, and how, from its pod; the autoscaler then removed the
    node, and the pod with it. fetch reads only the job's bare Failed condition by then, which
    must not replace the cause in the record."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    container = "node" if job_api == "trainjob" else "pytorch"
    oom = [{"name": container, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]  # fmt: skip
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Running"), log=pod_log(range(2), "training\n"))
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Failed", containerStatuses=oom), log="")
    cluster.set_job_condition(job_api, RUN_ID, "Failed", "the job failed")
    seen = backend.status(handle)
    assert seen.exit_code == 137 and "node 1" in seen.reason and "OOMKilled" in seen.reason
    cluster.remove_pods()
    with pytest.raises(RunnerError, match="its pods are gone"):
        backend.fetch(handle, run_dir)
    assert read_state(run_dir) == seen


def test_fetch_prefers_the_results_store(cluster, tmp_path):
    store = tmp_path / "store"
    backend = make_backend(cluster, tmp_path / "results", "trainjob", store=f"file://{store}")
    handle, run_dir = submit(backend, tmp_path / "results", make_spec())
    (store / RUN_ID).mkdir(parents=True)
    from_store = {**SUMMARY, "from": "store"}
    (store / RUN_ID / "summary.json").write_text(json.dumps(from_store))
    run_pods(cluster, "trainjob", phase="Succeeded")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    assert files.read_json(run_dir / rundir.SUMMARY) == from_store  # as the store had it
    # What the store lacks comes from the log.
    assert files.read_json(run_dir / rundir.MANIFEST) == MANIFEST


def test_logs_of_a_fetched_run_come_from_its_directory_without_the_cluster(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    run_pods(cluster, "trainjob", phase="Succeeded")
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    assert backend.fetch(handle, run_dir) == []
    asked = cluster.requests()
    assert list(backend.logs(handle, 3, follow=True)) == ["rank 3 training", "rank 3 done"]
    assert cluster.requests() == asked


def test_a_damaged_state_json_is_replaced_by_what_the_cluster_says(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    (run_dir / rundir.STATE).write_text('{"state": "SUCCEEDED", "schema_version": "x"}')
    assert backend.status(handle).state is JobState.PENDING
    assert read_state(run_dir).state is JobState.PENDING


def test_fetch_of_a_running_job_keeps_it_and_reports_what_is_missing(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod("trainjob", RUN_ID, 0), log="[rank0]:still going\n")
    missing = backend.fetch(handle, run_dir)
    assert "summary.json" in missing and "logs/rank-3.log" in missing
    assert cluster.job("trainjob", RUN_ID) is not None


def test_fetch_after_the_pods_are_gone_is_a_clear_error(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded")  # pods cleaned up meanwhile
    with pytest.raises(RunnerError) as err:
        backend.fetch(handle, run_dir)
    message = str(err.value)
    assert "pods are gone" in message and "logs/rank-0.log" in message
    assert "rerun" in message


def test_fetch_after_the_job_is_deleted_is_a_clear_error(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    backend.api.delete_job(RUN_ID)
    with pytest.raises(
        RunnerError, match=r"not on the cluster.*FAILED.*deleted before it finished"
    ):
        backend.fetch(handle, run_dir)
    assert read_state(run_dir).state is JobState.FAILED


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
