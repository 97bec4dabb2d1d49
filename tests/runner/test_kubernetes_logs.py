"""KubernetesBackend's logs against a fake API server (kmock): a pod's output split by rank
(torchrun's prefix), followed across a restarted container, and refused with a reason for a
rank outside the job or a run that left none."""

from __future__ import annotations

import threading

import pytest

from contract import events as keys
from runner.errors import RunnerError
from runner.job.spec import Placement, resolve
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, submit
from tests.runner.k8s_runlogs import APIS, run_pods

pytestmark = pytest.mark.timeout(60)


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
