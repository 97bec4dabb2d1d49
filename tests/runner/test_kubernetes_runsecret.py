"""A cluster run's own Secret (runner/backends/kubernetes/runsecret.py): the random secret that
signs its elastic records reaches the worker containers from that Secret alone, never a file of
the run; the Secret is owned by the job and deleted by every path that deletes the job.

Against the fake API server (tests/runner/k8s_fake.py), which stores the Secret as the real one
does and plays the garbage collector (deleting a job deletes what names it as an owner: the
real one does so within seconds, the fake at once). It enforces no RBAC: test_runner_role.py
holds the Role to the requests made here."""

from __future__ import annotations

import base64
import logging
import re
from datetime import datetime

import pytest

from contract.rundir import JobState
from contract.runsecret import SECRET_ENV, SECRET_KEY, secret_name
from runner.backends.kubernetes.render import render, to_yaml
from runner.errors import RunnerError
from runner.job.spec import JobSpec, Placement, resolve
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_backend, make_spec, pod, stack_connection, submit
from tests.runner.k8s_runlogs import SUCCESS, UNSCHEDULABLE, run_pods

pytestmark = pytest.mark.timeout(60)
APIS = ["trainjob", "pytorchjob"]
SECRET = secret_name(RUN_ID)
HEX_SECRET = re.compile(r"^[0-9a-f]{64}$")


def _containers(manifest: dict) -> list[dict]:
    """Every container that runs workers: a TrainJob's trainer, a PyTorchJob's replicas'."""
    if manifest["kind"] == "TrainJob":
        return [manifest["spec"]["trainer"]]
    replicas = manifest["spec"]["pytorchReplicaSpecs"].values()
    return [c for r in replicas for c in r["template"]["spec"]["containers"]]


def _secret_value(cluster: FakeCluster) -> str:
    secret = cluster.secret(SECRET)
    assert secret is not None
    return base64.b64decode(secret["data"][SECRET_KEY]).decode()


def _elastic_spec() -> JobSpec:
    placement = Placement(num_nodes=3, procs_per_node=1, device="cpu", min_workers=2)
    overrides = ["strategy=allreduce", "compile_model=false"]
    return resolve("resnet20-cifar10", overrides, placement, run_id=RUN_ID)


@pytest.mark.parametrize(
    ("job_api", "elastic"), [("trainjob", False), ("pytorchjob", False), ("pytorchjob", True)]
)
def test_every_worker_container_takes_the_secret_from_the_runs_secret(job_api, elastic):
    spec = _elastic_spec() if elastic else make_spec()
    manifest = render(spec, stack_connection(job_api))
    containers = _containers(manifest)
    assert containers
    for container in containers:
        [entry] = [e for e in container["env"] if e["name"] == SECRET_ENV]
        ref = {"name": SECRET, "key": SECRET_KEY}
        assert entry == {"name": SECRET_ENV, "valueFrom": {"secretKeyRef": ref}}  # no value


@pytest.mark.parametrize("job_api", APIS)
def test_submit_makes_a_random_secret_owned_by_the_job_and_no_file_of_the_run_holds_it(
    cluster, tmp_path, job_api, caplog
):
    caplog.set_level(logging.DEBUG)
    backend = make_backend(cluster, tmp_path, job_api)
    handle, run_dir = submit(backend, tmp_path, make_spec())
    job = cluster.job(job_api, RUN_ID)
    secret = cluster.secret(SECRET)
    assert job is not None and secret is not None
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": RUN_ID,
             "uid": job["metadata"]["uid"]}  # fmt: skip
    assert secret["metadata"]["ownerReferences"] == [owner]
    assert secret["immutable"] is True and secret["type"] == "Opaque"
    value = _secret_value(cluster)
    assert HEX_SECRET.match(value)
    # The job the cluster has reads it from the Secret (what the kubelet resolves for a pod).
    for container in _containers(job):
        assert {"name": SECRET_ENV, "valueFrom": {"secretKeyRef": {"name": SECRET,
                "key": SECRET_KEY}}} in container["env"]  # fmt: skip
    # The whole run, fetched: no file of it, and no log line, holds the secret.
    run_pods(cluster, job_api, phase="Succeeded")
    cluster.set_job_condition(job_api, RUN_ID, SUCCESS[job_api])
    assert backend.fetch(handle, run_dir) == []
    backend.close()
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(written) > 3
    assert not [p for p in written if value.encode() in p.read_bytes()]
    assert value not in caplog.text and value not in to_yaml(job)
    # The complete fetch deleted the job, and its Secret with it.
    assert cluster.job(job_api, RUN_ID) is None and cluster.secret(SECRET) is None


def test_each_run_gets_its_own_secret(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    submit(backend, tmp_path, make_spec())
    first = _secret_value(cluster)
    backend.cancel(f"k8s://bench/{RUN_ID}")
    submit(backend, tmp_path / "again", make_spec())
    assert _secret_value(cluster) != first
    backend.close()


@pytest.mark.parametrize("job_api", APIS)
def test_cancel_and_the_pending_timeout_delete_the_secret_with_the_job(cluster, tmp_path, job_api):
    backend = make_backend(cluster, tmp_path, job_api)
    handle, _ = submit(backend, tmp_path, make_spec())
    backend.cancel(handle)
    assert cluster.job(job_api, RUN_ID) is None and cluster.secret(SECRET) is None
    # Deleted by name at once, not left to the garbage collector (which is slower, and takes
    # nothing when the job's uid was unknown and the Secret has no owner).
    assert cluster.requests("DELETE", f"/secrets/{SECRET}$") == 1
    backend.close()
    # Pending past --pending-timeout: deleted, as cancel deletes.
    clock = lambda: datetime.fromisoformat("2030-01-01T00:11:40+00:00")  # noqa: E731
    backend = make_backend(cluster, tmp_path / "p", job_api, pending_timeout_s=600, clock=clock)
    handle, _ = submit(backend, tmp_path / "p", make_spec())
    assert cluster.secret(SECRET) is not None
    conditions = [{"type": "PodScheduled", "status": "False", "message": UNSCHEDULABLE}]
    cluster.add_pod(pod(job_api, RUN_ID, 0, "Pending", conditions=conditions))
    assert backend.status(handle).state is JobState.CANCELLED
    assert cluster.job(job_api, RUN_ID) is None and cluster.secret(SECRET) is None
    assert cluster.requests("DELETE", f"/secrets/{SECRET}$") == 2
    backend.close()


def test_deleting_the_job_by_any_other_means_takes_its_secret(cluster, tmp_path):
    """The ownerReference at work: a job deleted behind the runner's back (kubectl, the
    operator's TTL) takes its Secret, through the garbage collector the fake plays."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    submit(backend, tmp_path, make_spec())
    backend.api.delete_job(RUN_ID)  # the job alone, as kubectl delete pytorchjob would
    assert cluster.secret(SECRET) is None
    backend.close()


def test_a_secret_already_under_the_runs_name_is_refused_and_left_alone(cluster, tmp_path):
    """Someone who made the Secret first would know the key: the run is not started on it."""
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    planted = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": SECRET, "namespace": "bench"},
               "data": {SECRET_KEY: base64.b64encode(b"0" * 64).decode()}}  # fmt: skip
    backend.api.core.create_namespaced_secret("bench", planted)
    with pytest.raises(RunnerError, match=r"already in namespace bench.*kubectl delete secret"):
        submit(backend, tmp_path, make_spec())
    assert cluster.job("pytorchjob", RUN_ID) is None  # withdrawn: no pod runs on that key
    assert _secret_value(cluster) == "0" * 64  # not ours to delete
    backend.close()


def test_a_role_without_secrets_says_how_to_update_it_and_withdraws_the_job(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    cluster.fail("POST", "/secrets$", 403, message='secrets is forbidden: cannot create "secrets"')
    with pytest.raises(RunnerError, match=r"forbidden by RBAC.*`pulumi up` adds them") as err:
        submit(backend, tmp_path, make_spec())
    assert "\n" not in str(err.value)
    assert cluster.job("trainjob", RUN_ID) is None
    backend.close()


def test_a_refusal_that_quotes_the_secret_is_reported_without_it(cluster, tmp_path, caplog):
    """An API server's message may quote the body it refused (a webhook's, a proxy's): the
    error the user reads, and the log, never hold the secret."""
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    backend = make_backend(cluster, tmp_path, "pytorchjob")
    real = backend.api.core.create_namespaced_secret

    def quoting(namespace, body, **kwargs):
        """The official client's call, once the server is set to refuse with the body quoted
        (the secret is made inside submit: this is where the test learns it)."""
        seen.append(base64.b64decode(body["data"][SECRET_KEY]).decode())
        cluster.fail("POST", "/secrets$", 400, message=f"refused {body['data']} ({seen[-1]})")
        return real(namespace, body, **kwargs)

    backend.api.core.create_namespaced_secret = quoting
    with pytest.raises(RunnerError) as err:
        submit(backend, tmp_path, make_spec())
    assert seen and seen[0] not in str(err.value) and "<the run's secret>" in str(err.value)
    assert seen[0] not in caplog.text
    assert cluster.job("pytorchjob", RUN_ID) is None
    backend.close()
