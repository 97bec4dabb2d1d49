"""KubernetesBackend when the API fails: 403 (RBAC), 404 (a missing add-on's CRD), 409 (name
conflict), 5xx (bounded retries) and an unreachable server; each error names the next step."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from runner.backends.kubernetes.backend import KubernetesBackend
from runner.backends.kubernetes.client import KubeApi
from runner.errors import RunnerError
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_spec, stack_connection
from tests.runner.test_kubernetes_backend import make_backend, submit

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(namespace="bench")
    yield fake
    fake.close()


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
def test_missing_crd_names_the_addon_the_stack_lacks(cluster, tmp_path, job_api, addon):
    backend = make_backend(cluster, tmp_path, job_api)
    cluster.fail("post", r"/(trainjobs|pytorchjobs)$", 404, message="the server could not find")
    with pytest.raises(RunnerError) as err:
        submit(backend, tmp_path, make_spec())
    assert addon in str(err.value) and "pulumi up" in str(err.value)


def test_name_conflict_says_the_run_exists(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    spec = make_spec()
    backend.submit(spec, tmp_path)
    with pytest.raises(RunnerError, match=f"already exists.*runner status {RUN_ID}"):
        backend.submit(spec, tmp_path)


def test_transient_server_errors_are_retried(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    cluster.fail("post", "/trainjobs$", 500, times=2)
    handle, _ = submit(backend, tmp_path, make_spec())
    assert handle.endswith(RUN_ID)
    assert cluster.requests("post", "/trainjobs$") == 3


def test_persistent_server_errors_give_up_after_bounded_retries(cluster, tmp_path):
    backend = make_backend(cluster, tmp_path, "trainjob")
    handle, _ = submit(backend, tmp_path, make_spec())
    cluster.fail("get", f"/trainjobs/{RUN_ID}$", 503, times=100)
    with pytest.raises(RunnerError, match="HTTP 503 3 times"):
        backend.status(handle)
    assert cluster.requests("get", f"/trainjobs/{RUN_ID}$") == 3


def test_unreachable_cluster_says_how_to_check_it(tmp_path):
    kubeconfig = json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    })  # fmt: skip
    conn = stack_connection("trainjob", kubeconfig=kubeconfig)
    api = KubeApi(conn, max_attempts=2, retry_backoff_s=0.001, request_timeout_s=2)
    backend = KubernetesBackend(conn, api_factory=lambda c: api)
    with pytest.raises(RunnerError, match=r"unreachable.*pulumi stack output --stack gke-gpu-8"):
        backend.submit(make_spec(), tmp_path)
