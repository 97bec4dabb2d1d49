"""KubernetesBackend when the API fails: 403 (RBAC), 404 (a missing add-on's CRD), 409 (name
conflict), 5xx (bounded retries), an unreachable server (and a run whose submit failed there),
and a server that is not an API server; each error is one line that names the next step.
(Failures of watches: test_kubernetes_watch_faults.py.)"""

from __future__ import annotations

import json
import socket

import pytest

from contract.rundir import JobState, JobStatus, read_state
from runner.backends.kubernetes.api.client import KubeApi, Selector
from runner.backends.kubernetes.backend import KubernetesBackend
from runner.errors import RunnerError
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, stack_connection, submit

pytestmark = pytest.mark.timeout(60)


def test_forbidden_names_rbac_and_how_to_check(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    cluster.fail("post", "/trainjobs$", 403, message='trainjobs is forbidden: User "ci"')
    with pytest.raises(RunnerError) as err:
        submit(backend, tmp_path, make_spec())
    assert "forbidden by RBAC" in str(err.value) and "kubectl auth can-i" in str(err.value)


@pytest.mark.parametrize(
    ("job_api", "addon"),
    [("trainjob", "Kubeflow Trainer"), ("pytorchjob", "training-operator")],
)
def test_missing_crd_names_the_addon_the_stack_lacks(tmp_path, job_api, addon):
    cluster = FakeCluster(namespace="bench", installed=())
    try:
        backend = make_backend(cluster, tmp_path, job_api)
        cluster.fail("post", r"/(trainjobs|pytorchjobs)$", 404, message="the server could not find")
        with pytest.raises(RunnerError) as err:
            submit(backend, tmp_path, make_spec())
        assert addon in str(err.value) and "pulumi up" in str(err.value)
    finally:
        cluster.close()


def test_name_conflict_says_the_run_exists(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    request = backend.dryrun(make_spec(), tmp_path)
    backend.submit(request)
    with pytest.raises(RunnerError, match=f"already exists.*runner status {RUN_ID}"):
        backend.submit(request)


@pytest.mark.parametrize("status", [429, 503])
def test_load_is_retried(cluster, tmp_path, status):
    backend = make_backend(cluster, tmp_path, "trainjob")
    cluster.fail("post", "/trainjobs$", status, times=2)
    handle, _ = submit(backend, tmp_path, make_spec())
    assert handle.endswith(RUN_ID)
    assert cluster.requests("post", "/trainjobs$") == 3


def test_a_server_failure_is_reported_in_its_own_words_not_retried(cluster, tmp_path):
    """A 500 is the server's account of a failure (here: the admission webhook it called), not
    load: retrying it gains nothing, and "overloaded" would hide what it said."""
    backend = make_backend(cluster, tmp_path, "trainjob")
    said = 'Internal error occurred: failed calling webhook "defaulter.trainjob.kubeflow.org"'
    cluster.fail("post", "/trainjobs$", 500, times=5, message=said)
    with pytest.raises(RunnerError) as err:
        submit(backend, tmp_path, make_spec())
    assert said in str(err.value) and f"create TrainJob {RUN_ID}" in str(err.value)
    assert "overloaded" not in str(err.value)
    assert cluster.requests("post", "/trainjobs$") == 1


def test_an_admission_webhook_refusal_is_not_called_rbac(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    said = 'admission webhook "validator.trainjob.kubeflow.org" denied the request: bad runtime'
    cluster.fail("post", "/trainjobs$", 403, message=said)
    with pytest.raises(RunnerError) as err:
        submit(backend, tmp_path, make_spec())
    assert said in str(err.value) and "RBAC" not in str(err.value)


def test_persistent_server_errors_give_up_after_bounded_retries(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.fail("get", f"/trainjobs/{RUN_ID}$", 503, times=100)
    with pytest.raises(RunnerError, match="HTTP 503 3 times"):
        backend.status(handle)
    assert cluster.requests("get", f"/trainjobs/{RUN_ID}$") == 3


def closed_port() -> int:
    """A local port nothing listens on: connections to it are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kubeconfig_for(server: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "bench"}}],
    })  # fmt: skip


def unreachable_backend(tmp_path) -> KubernetesBackend:
    conn = stack_connection(
        "trainjob", kubeconfig=kubeconfig_for(f"http://127.0.0.1:{closed_port()}")
    )
    api = lambda c: KubeApi(c, max_attempts=2, retry_backoff_s=0.001, request_timeout_s=2)  # noqa: E731
    return KubernetesBackend(conn, results_root=tmp_path, api_factory=api)


def test_unreachable_cluster_says_how_to_check_it(tmp_path):
    backend = unreachable_backend(tmp_path)
    with pytest.raises(RunnerError, match=r"unreachable.*pulumi stack output --stack gke-gpu-8"):
        backend.submit(backend.dryrun(make_spec(), tmp_path))


def test_a_run_whose_submit_failed_answers_every_question_without_the_cluster(tmp_path):
    """What runner.api does on a failed submit (the handle recorded first, then FAILED with
    the reason), and every method on that run, the API server still unreachable."""
    backend = unreachable_backend(tmp_path)
    spec = make_spec()
    request = backend.dryrun(spec, tmp_path / spec.run_id)
    handle = backend.handle(request)
    run_dir = rundir.create(
        tmp_path, rundir.RunRecord(spec, "kubernetes", handle, backend.reference)
    )
    with pytest.raises(RunnerError) as submit_error:
        backend.submit(request)
    failed = JobStatus(JobState.FAILED, f"submit failed: {submit_error.value}")
    rundir.write_state(run_dir, failed)

    assert handle == f"k8s://bench/{RUN_ID}"
    assert backend.status(handle) == failed
    assert list(backend.watch(handle)) == [failed]
    backend.cancel(handle)  # nothing to stop
    assert read_state(run_dir) == failed
    with pytest.raises(RunnerError) as logs_error:
        list(backend.logs(handle, 0, follow=False))
    message = str(logs_error.value)
    assert "no log of rank 0" in message and "submit failed" in message and "\n" not in message
    with pytest.raises(RunnerError) as fetch_error:
        backend.fetch(handle, run_dir)
    message = str(fetch_error.value)
    assert "still missing events.jsonl" in message and "logs/rank-3.log" in message
    assert "submit failed" in message and "unreachable" in message and "\n" not in message
    assert read_state(run_dir) == failed


# The second is JSON nested past the recursion limit: json.loads raises RecursionError on it.
@pytest.mark.parametrize("body", ["<html>a captive portal</html>", "[" * 100_000])
def test_a_server_that_is_not_an_api_server_is_named_in_one_line(tmp_path, server, body):
    served, url = server
    pods = served / "api" / "v1" / "namespaces" / "bench" / "pods"
    pods.parent.mkdir(parents=True)
    pods.write_text(body)
    conn = stack_connection("trainjob", kubeconfig=kubeconfig_for(url))
    backend = KubernetesBackend(conn, api_factory=lambda c: KubeApi(c, max_attempts=1))
    with pytest.raises(RunnerError, match=r"not JSON; is it a Kubernetes API server\?"):
        backend.api.list_objects("pods", Selector(label="x=y"))
    backend.close()


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
def test_a_cancel_whose_delete_failed_is_recorded_so_and_done_by_the_next(
    cluster, tmp_path, job_api
):
    """cancel records CANCELLED before it deletes the job; when the API server refuses the
    delete, the record says that the job may still run, and the next `runner cancel` deletes
    it, rather than answering from a record that says the run is over while its pods run on."""
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    for node in (0, 1):
        cluster.add_pod(pod(job_api, RUN_ID, node), log="")
    # As many times as make_backend's client tries: every try of this cancel, then no more.
    cluster.fail("delete", r"/(trainjobs|pytorchjobs)/", 503, times=3)
    with pytest.raises(RunnerError, match="HTTP 503"):
        backend.cancel(handle)
    assert cluster.job(job_api, RUN_ID) is not None
    recorded = read_state(run_dir)
    assert recorded.state is JobState.CANCELLED
    assert "may still run" in recorded.reason and f"runner cancel {RUN_ID}" in recorded.reason
    assert backend.status(handle) == recorded  # status says so too
    backend.cancel(handle)  # the server is back
    assert cluster.job(job_api, RUN_ID) is None
    assert read_state(run_dir) == JobStatus(JobState.CANCELLED, "cancelled", recorded.since)
    before = cluster.requests()
    backend.cancel(handle)  # cancelled and deleted: nothing more to ask the cluster
    assert cluster.requests() == before


def test_a_pending_timeout_whose_delete_failed_leaves_a_record_that_cancel_acts_on(
    cluster, tmp_path
):
    """The pending timeout records CANCELLED, with what the job waited on (up to the record's
    cap), before it deletes the job; a failed delete must still read as such, and be done by
    `runner cancel`."""
    from datetime import datetime

    clock = lambda: datetime.fromisoformat("2030-01-01T00:11:40+00:00")  # noqa: E731
    backend = make_backend(cluster, tmp_path, "trainjob", pending_timeout_s=600, clock=clock)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    unschedulable = [{"type": "PodScheduled", "status": "False", "message": "no nodes " * 100}]
    cluster.add_pod(pod("trainjob", RUN_ID, 0, "Pending", conditions=unschedulable))
    cluster.fail("delete", r"/trainjobs/", 503, times=3)
    with pytest.raises(RunnerError, match="HTTP 503"):
        backend.status(handle)
    recorded = read_state(run_dir)
    assert recorded.state is JobState.CANCELLED and "pending for 700 s" in recorded.reason
    assert f"may still run (cannot delete TrainJob {RUN_ID}" in recorded.reason
    assert recorded.reason.endswith(f"`runner cancel {RUN_ID}` deletes it")
    backend.cancel(handle)
    assert cluster.job("trainjob", RUN_ID) is None
    assert read_state(run_dir).reason.startswith("pending for 700 s")
    assert "may still run" not in read_state(run_dir).reason


def _renamed(job: dict) -> dict:
    job["metadata"] |= {"name": "someone-elses-job", "uid": "uid-other"}
    return job


def _moved(job: dict) -> dict:
    job["metadata"]["namespace"] = "another-team"
    return job


def _retyped(job: dict) -> dict:
    job["kind"], job["apiVersion"] = "PyTorchJob", "kubeflow.org/v1"
    return job


def _unnamed_namespace(job: dict) -> dict:
    del job["metadata"]["namespace"]
    return job


# A server (or a proxy in front of it) that answers a GET with another object than the one
# asked for: another job, the same name in another namespace, another kind, no namespace.
@pytest.mark.parametrize(
    ("swap", "named"),
    [
        (_renamed, "'someone-elses-job'"),
        (_moved, "'another-team'"),
        (_retyped, "PyTorchJob"),
        (_unnamed_namespace, "namespace None"),
    ],
)
def test_a_job_answered_with_another_object_is_refused_where_it_is_read(
    cluster, tmp_path, swap, named
):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, run_dir = submit(backend, tmp_path, make_spec())
    cluster.swap("trainjob", RUN_ID, swap)
    with pytest.raises(RunnerError) as read:
        backend.api.get_job(RUN_ID)
    message = str(read.value)
    assert f"get TrainJob {RUN_ID}" in message and "instead of" in message, message
    assert named in message and "\n" not in message, message
    # The run's record is left as it was: a server's mistake is not the run's end.
    with pytest.raises(RunnerError, match="instead of"):
        backend.status(handle)
    assert read_state(run_dir) is None or not read_state(run_dir).state.finished
    backend.close()
