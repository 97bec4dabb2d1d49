"""A cluster job's success is the run's only when the run can show it: every node's pod, each
with its job container's exit 0, and rank 0's summary read from a log that was not cut. Against
the kmock-based fake API server (k8s_fake.py), where the test plays the controllers: a TrainJob
marked Complete with no pod (a JobSet completed by hand, a controller's bug), a PyTorchJob
Succeeded with a node that left no pod, a pod that records no exit, and a pod log past the
runner's cap."""

from __future__ import annotations

import pytest

from contract.rundir import JobState, read_state
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.api.limits import ApiLimits
from runner.errors import RunnerError
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import SUCCESS, pod_log, rank0_stdout

pytestmark = pytest.mark.timeout(60)
APIS = ["trainjob", "pytorchjob"]


@pytest.mark.parametrize("job_api", APIS)
def test_a_job_reported_successful_that_left_no_pod_is_failed(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    (final,) = [s for s in backend.watch(handle) if s.state.finished]
    assert final.state is JobState.FAILED
    assert f"reports {SUCCESS[job_api]}" in final.reason and "no pod" in final.reason
    with pytest.raises(RunnerError, match="no pod"):  # nothing to bring home, and why
        backend.fetch(handle, run_dir)
    assert read_state(run_dir) == final
    assert backend.status(handle) == final
    backend.close()


def test_a_node_that_left_no_pod_fails_the_run(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.add_pod(pod("pytorchjob", RUN_ID, 0, "Succeeded"), log=pod_log(range(2), ""))
    cluster.set_job_condition("pytorchjob", RUN_ID, "Succeeded")
    status = backend.status(handle)
    assert status.state is JobState.FAILED and "node(s) 1 left no pod" in status.reason
    backend.close()


def test_a_pod_that_records_no_exit_fails_the_run(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        ended = pod("trainjob", RUN_ID, node, "Succeeded")
        if node == 1:
            ended["status"]["containerStatuses"] = []  # the kubelet said Succeeded, and no more
        cluster.add_pod(ended)
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")
    status = backend.status(handle)
    assert status.state is JobState.FAILED and "records no exit" in status.reason
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_a_log_cut_before_its_summary_is_never_a_success(cluster, tmp_path, job_api):
    """Rank 0 printed more than the runner takes (max_log_bytes) before its summary: the run
    says its log was cut, and is FAILED rather than read as the job's success."""
    limits = ApiLimits(max_log_bytes=64 << 10)
    backend = make_backend(cluster, tmp_path, job_api)
    backend._api_factory = lambda c: KubeApi(c, max_attempts=2, retry_backoff_s=0.001,
                                             limits=limits)  # fmt: skip
    handle, run_dir = submit(backend, tmp_path, make_spec())
    chatter = "".join(f"step {i} of a very chatty rank 0\n" for i in range(4000))  # ~140 KiB
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Succeeded"),
                    log=pod_log(range(2), chatter + rank0_stdout()))  # fmt: skip
    cluster.add_pod(pod(job_api, RUN_ID, 1, "Succeeded"), log=pod_log(range(2, 4), ""))
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    missing = backend.fetch(handle, run_dir)
    recorded = read_state(run_dir)
    assert recorded is not None and recorded.state is JobState.FAILED
    assert "rank 0's log was cut after 0.0625 MiB" in recorded.reason
    assert "STACKBENCH_K8S_MAX_LOG_MIB" in recorded.reason
    assert any("node 0's log (cut after" in m for m in missing)
    assert (run_dir / "logs" / "rank-0.log").stat().st_size <= 64 << 10
    backend.close()
