"""Which job controller ran a run: submit reads the controller's Deployment from the fake API
server (which answers Deployments with RBAC's 403 where no Role grants them, k8s_emulator.py)
and records its image and version in job.json's `cluster.controller`; a forbidden, missing or
hostile Deployment is recorded "unknown" with a short reason, and the submit still succeeds."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from contract import files
from contract.rundir import JobState
from contract.stack import JOB_CONTROLLERS
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.api.limits import ApiLimits
from runner.backends.kubernetes.backend import KubernetesBackend
from runner.backends.kubernetes.controller import (
    MAX_REASON_CHARS,
    UNKNOWN,
    Unreadable,
    forbidden,
    image_version,
)
from runner.results import rundir
from tests.runner.k8s_fake import CONTROLLER_IMAGES, FakeCluster, controller_deployment
from tests.runner.k8s_helpers import make_backend, make_spec, stack_connection, submit
from tests.runner.k8s_socket import RawServer, Request, head

pytestmark = pytest.mark.timeout(60)


def submitted(cluster: FakeCluster, root: Path, job_api: str) -> dict[str, Any]:
    """Submit a run; its job.json's `cluster.controller`, after checking the job was made and
    the run is pending (the submit succeeded)."""
    with make_backend(cluster, root, job_api) as backend:
        handle, run_dir = submit(backend, root, make_spec())
        assert backend.listed_status(handle).state is JobState.PENDING
    assert cluster.job(job_api, make_spec().run_id) is not None
    return files.read_json(run_dir / rundir.JOB)["cluster"]["controller"]


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
def test_submit_records_the_controllers_image_and_version(cluster, tmp_path, job_api):
    controller = JOB_CONTROLLERS[job_api]  # type: ignore[index]
    recorded = submitted(cluster, tmp_path, job_api)
    assert recorded == {
        "deployment": f"{controller.namespace}/{controller.deployment}",
        "image": CONTROLLER_IMAGES[job_api],
        "version": {"trainjob": "v2.3.0", "pytorchjob": "v1-93c5489"}[job_api],
    }
    # Read once, with a get of that one Deployment, as the Role's resourceNames allows.
    path = f"/namespaces/{controller.namespace}/deployments/{controller.deployment}$"
    assert cluster.requests("GET", path) == 1
    assert cluster.requests("GET", "/deployments") == 1


def test_a_forbidden_deployment_is_recorded_unknown_and_the_submit_succeeds(cluster, tmp_path):
    """An identity made before stacks granted the Role: the real server's 403."""
    cluster.forbid_deployments()
    recorded = submitted(cluster, tmp_path, "trainjob")
    assert recorded["version"] == UNKNOWN and "image" not in recorded
    # The connection is stack gke-gpu-8's (k8s_helpers.stack_connection): the Role is missing.
    assert recorded["reason"].startswith("forbidden:")
    assert "`pulumi up --stack gke-gpu-8` does" in recorded["reason"]


def test_a_forbidden_read_on_a_kubeconfigs_cluster_blames_the_users_permissions():
    assert "the kubeconfig's user may not get" in forbidden(None)


def test_a_missing_deployment_is_recorded_unknown(cluster, tmp_path):
    """A cluster whose controller is installed elsewhere: the Role allows, the server has none."""
    controller = JOB_CONTROLLERS["trainjob"]
    cluster.remove_deployment(controller.namespace, controller.deployment)
    recorded = submitted(cluster, tmp_path, "trainjob")
    assert recorded["version"] == UNKNOWN and "no such Deployment" in recorded["reason"]


HOSTILE = {
    "huge image": ("ghcr.io/x:" + "9" * 1_000_000, None, "1000010 characters long"),
    "control characters": ("ghcr.io/x:v1\x1b[31m\n\x00", None, "no image reference"),
    "not text": ({"$ne": 1}, None, "has no image"),
    "no containers": ("", [], "no containers"),
    "containers not a list": ("", "garbage", "no containers"),
    "no manager container": ("", [{"name": "sidecar", "image": "a:1"}], "no container named"),
    "untagged": ("ghcr.io/kubeflow/trainer/trainer-controller-manager", None, "no tag or digest"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_a_hostile_deployment_is_recorded_unknown_bounded_and_escaped(cluster, tmp_path, case):
    image, containers, reason = HOSTILE[case]
    cluster.put_deployment(controller_deployment("trainjob", image, containers))
    recorded = submitted(cluster, tmp_path, "trainjob")
    assert recorded["version"] == UNKNOWN and "image" not in recorded
    assert reason in recorded["reason"]
    text = recorded["reason"]
    assert len(text) <= MAX_REASON_CHARS and text.isprintable() and "\x1b" not in text


def test_another_object_than_the_deployment_asked_for_is_not_read_as_it(cluster, tmp_path):
    deployment = controller_deployment("trainjob", "ghcr.io/evil:v9")
    deployment["metadata"]["name"] = "something-else"
    controller = JOB_CONTROLLERS["trainjob"]
    cluster.put_deployment(deployment, at=(controller.namespace, controller.deployment))
    recorded = submitted(cluster, tmp_path, "trainjob")
    assert recorded["version"] == UNKNOWN and "another object" in recorded["reason"]


def test_a_failing_server_is_recorded_unknown_in_one_short_line(cluster, tmp_path):
    cluster.fail("GET", "/deployments/", 500, message="boom\n\x1b[2Jsecond line " + "x" * 500)
    recorded = submitted(cluster, tmp_path, "trainjob")
    text = recorded["reason"]
    assert recorded["version"] == UNKNOWN and text.startswith("not read:") and "boom" in text
    assert len(text) <= MAX_REASON_CHARS and text.isprintable()


def test_an_image_names_its_tag_else_its_digest():
    digest = "sha256:" + "ab" * 32
    assert image_version("registry:5000/org/ctl:v2.3.0") == "v2.3.0"
    assert image_version(f"ghcr.io/ctl:v2.3.0@{digest}") == "v2.3.0"
    assert image_version(f"ghcr.io/ctl@{digest}") == digest
    for untagged in ("registry:5000/org/ctl", "ghcr.io/ctl@sha256:short"):
        with pytest.raises(Unreadable):
            image_version(untagged)


def test_a_deployment_read_that_never_answers_holds_the_submit_only_to_its_deadline(tmp_path):
    """A real socket that takes the Deployment request and never answers: the read gives up at
    its deadline (here the call deadline of 1 s, below the read's own 10 s), the version is
    unknown, and the job is created all the same."""

    def answer(request: Request, conn: socket.socket) -> None:
        if request.method == "GET":
            threading.Event().wait(30)  # held open, silent
            return
        body = json.dumps({"metadata": {"name": "x", "uid": "uid-1"}}).encode()
        conn.sendall(head("201 Created", {"Content-Length": str(len(body))}) + body)

    server = RawServer(answer)
    conn = stack_connection("trainjob", None, kubeconfig=server.kubeconfig())
    limits = ApiLimits(call_deadline_s=1.0)
    backend = KubernetesBackend(
        conn, results_root=tmp_path, api_factory=lambda c: KubeApi(c, limits=limits)
    )
    try:
        with backend:
            _, run_dir = submit(backend, tmp_path, make_spec())
    finally:
        server.close()
    recorded = files.read_json(run_dir / rundir.JOB)["cluster"]
    assert recorded["job_uid"] == "uid-1"
    assert recorded["controller"]["version"] == UNKNOWN
    assert "deadline of 1 s" in recorded["controller"]["reason"]
    assert [r.method for r in server.requests] == ["GET", "POST", "POST"]  # job, then Secret
