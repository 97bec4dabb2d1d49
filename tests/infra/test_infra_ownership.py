"""The real infra program under Pulumi mocks, for every file in stacks/ (the cached `ev` fixture,
conftest.py): ownership and teardown. Every Kubernetes object uses the cluster's provider and
dies with it, every resource is a child of a component, stores and registries empty themselves
on destroy, the results store is private and bound to the job's service account, and the kind
results folder belongs to the image's user."""

from __future__ import annotations

import json

import pytest
from infra_harness import evaluate
from stack_reads import cluster_resource, kind_config

from contract.stack import IMAGE_UID, RESULTS_MOUNT_PATH

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# ---- ownership and teardown ------------------------------------------------------------------


def test_every_kubernetes_object_uses_the_cluster_provider_and_dies_with_it(ev):
    [provider] = ev.of_type("pulumi:providers:kubernetes")
    cluster_urn = cluster_resource(ev).urn
    objects = [r for r in ev.resources if r.type.startswith("kubernetes:")]
    assert len(objects) >= 3
    for obj in objects:
        assert obj.provider.startswith(provider.urn + "::"), obj.name
        assert obj.deleted_with == cluster_urn, obj.name
    assert json.loads(provider.inputs["kubeconfig"].value)["kind"] == "Config"


def test_every_resource_is_a_child_of_a_component(ev):
    stack_urn = f"urn:pulumi:{ev.stack}::stackbench::pulumi:pulumi:Stack::stackbench-{ev.stack}"
    top = {r.name for r in ev.resources if r.parent == stack_urn}
    assert all(r.type.startswith("stackbench:index:") for r in ev.resources if r.name in top)


def test_stores_and_registries_empty_themselves_on_destroy(ev):
    for repo in ev.of_type("aws:ecr/repository:Repository"):
        assert repo.inputs["forceDelete"] is True
    buckets = ev.of_type("gcp:storage/bucket:Bucket") + ev.of_type("aws:s3/bucket:Bucket")
    assert all(b.inputs["forceDestroy"] is True for b in buckets)
    assert len(buckets) == (0 if ev.value("provider") == "kind" else 1)


def test_results_store_is_private_and_bound_to_the_job_service_account(ev):
    store, kind = ev.value("results_store"), ev.value("provider")
    sa = ev.one("kubernetes:core/v1:ServiceAccount", "-addons-sa")  # the jobs', not the runner's
    assert sa.inputs["metadata"]["name"] == ev.value("service_account")
    assert sa.inputs["metadata"]["namespace"] == ev.value("namespace")
    annotations = sa.inputs["metadata"].get("annotations", {})
    subject = f"{ev.value('namespace')}:{ev.value('service_account')}"
    if kind == "gke":
        bucket = ev.one("gcp:storage/bucket:Bucket")
        assert store == f"gs://{bucket.name}-7f3a"
        assert bucket.inputs["publicAccessPrevention"] == "enforced"
        binding = ev.one("gcp:serviceaccount/iAMMember:IAMMember", "-wi")
        assert binding.inputs["member"].endswith(f"[{subject.replace(':', '/')}]")
        writer = ev.one("gcp:serviceaccount/account:Account", "-writer")
        assert annotations["iam.gke.io/gcp-service-account"].startswith(
            writer.inputs["accountId"] + "@"
        )
        # The job pods write the bucket through GKE's Cloud Storage FUSE CSI driver.
        addons = cluster_resource(ev).inputs["addonsConfig"]
        assert addons["gcsFuseCsiDriverConfig"] == {"enabled": True}
    elif kind == "eks":
        assert store.startswith("s3://")
        role = ev.one("aws:iam/role:Role", "-writer")
        policy = json.loads(role.inputs["assumeRolePolicy"])
        [condition] = [s["Condition"]["StringEquals"] for s in policy["Statement"]]
        assert f"system:serviceaccount:{subject}" in condition.values()
        assert annotations["eks.amazonaws.com/role-arn"].endswith(role.name)
        block = ev.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
        assert all(block.inputs[k] is True for k in ("blockPublicAcls", "blockPublicPolicy"))
    else:
        host_dir = store.removeprefix("file://")
        assert store.startswith("file:///") and annotations == {}
        for node in kind_config(ev)["nodes"]:
            assert {"hostPath": host_dir, "containerPath": RESULTS_MOUNT_PATH} in node[
                "extraMounts"
            ]


def test_kind_results_folder_belongs_to_the_image_user():
    """hostPath ignores fsGroup: pods (uid IMAGE_UID) can write the store only if they own it."""
    ev = evaluate("kind")
    script = ev.one("command:local:Command", "-cluster").inputs["create"]
    assert f"chown {IMAGE_UID}:{IMAGE_UID} {RESULTS_MOUNT_PATH}" in script
    assert script.index("kind create cluster") < script.index("chown")
