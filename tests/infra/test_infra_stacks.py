"""The real infra program, run for every file in stacks/ under Pulumi mocks.

Each test reads what the program registered (types, inputs, provider, parent, deletedWith)
and the stack outputs as the engine receives them, and checks one promise of the issue or
the runner contract. Evaluations are cached per stack: one program run per stack file.
"""

from __future__ import annotations

import json
import re

import pytest
from infra_harness import Evaluation, Secret, evaluate, stack_file_config, stack_names

from infra.outputs import OUTPUT_NAMES, RESULTS_MOUNT_PATH, SECRET_OUTPUTS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
STACKS = stack_names()
_CACHE: dict[str, Evaluation] = {}
K8S_EFFECT = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


@pytest.fixture(params=STACKS)
def ev(request) -> Evaluation:
    if request.param not in _CACHE:
        _CACHE[request.param] = evaluate(request.param)
    return _CACHE[request.param]


def setting(ev: Evaluation, key: str, default=None):
    return stack_file_config(ev.stack).get(f"stackbench:{key}", default)


def training_pool(ev: Evaluation):
    kind = ev.value("provider")
    if kind == "gke":
        return ev.one("gcp:container/nodePool:NodePool", "-training")
    if kind == "eks":
        return ev.one("eks:index:ManagedNodeGroup", "-training")
    return None


def pool_taints(ev: Evaluation) -> list[dict]:
    pool = training_pool(ev)
    if pool is None:
        return []
    taints = pool.inputs.get("nodeConfig", pool.inputs).get("taints", [])
    return [{**t, "effect": K8S_EFFECT[t["effect"]]} for t in taints]


def pool_labels(ev: Evaluation) -> dict:
    pool = training_pool(ev)
    return {} if pool is None else pool.inputs.get("nodeConfig", pool.inputs).get("labels", {})


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' matching rule for one toleration and one taint."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value") == taint.get("value")


def test_there_are_the_five_stacks_the_issue_names():
    assert {"kind", "gke-gpu-8", "eks-gpu-8", "gke-cpu-16"} <= set(STACKS)
    assert any(
        stack_file_config(s).get("stackbench:gpusPerNode") == "8"
        and stack_file_config(s).get("stackbench:maxNodes") == "1"
        for s in STACKS
    )


def test_stack_exports_exactly_the_runner_contract(ev):
    assert set(ev.outputs) == set(OUTPUT_NAMES)
    assert ev.value("results_mount_path") == RESULTS_MOUNT_PATH
    assert ev.value("job_api") in ("trainjob", "pytorchjob")
    assert ev.value("provider") == setting(ev, "provider")


def test_kubeconfig_is_the_only_secret_output(ev):
    secret = {name for name, value in ev.outputs.items() if isinstance(value, Secret)}
    assert secret == SECRET_OUTPUTS
    assert json.loads(ev.value("kubeconfig"))["kind"] == "Config"


def test_image_is_pinned_by_digest_never_a_tag(ev):
    image = ev.value("image")
    assert re.fullmatch(r"[a-z0-9.:-]+(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}", image), image
    build = ev.one("docker-build:index:Image")
    assert build.inputs["push"] is True
    assert not any(tag.endswith(":latest") for tag in build.inputs["tags"])
    variant = "cuda" if ev.value("gpus_per_node") else "cpu"
    assert build.inputs["buildArgs"] == {"VARIANT": variant}


def test_gpu_pool_taint_is_tolerated_by_the_exported_toleration(ev):
    taints, tolerations = pool_taints(ev), ev.value("gpu_tolerations")
    if ev.value("gpus_per_node") == 0:
        assert taints == [] and tolerations == []
        assert ev.value("node_selector").items() <= pool_labels(ev).items()
        return
    assert taints, "a GPU pool must be tainted so CPU pods stay off it"
    for taint in taints:
        assert any(tolerates(t, taint) for t in tolerations), (taint, tolerations)
    # ... and the selector picks exactly the labelled pool.
    assert ev.value("node_selector").items() <= pool_labels(ev).items()


def test_accelerator_type_and_count_follow_the_stack_file(ev):
    gpus = int(setting(ev, "gpusPerNode", "0"))
    assert ev.value("gpus_per_node") == gpus
    pool = training_pool(ev)
    if ev.value("provider") == "gke":
        accelerators = pool.inputs["nodeConfig"].get("guestAccelerators", [])
        expected = [(setting(ev, "gpuType"), gpus)] if gpus else []
        assert [(a["type"], a["count"]) for a in accelerators] == expected
    elif ev.value("provider") == "eks":
        ami = pool.inputs["amiType"]
        assert ami == ("AL2023_x86_64_NVIDIA" if gpus else "AL2023_x86_64_STANDARD")
        assert pool.inputs["instanceTypes"] == [setting(ev, "nodeMachineType")]


def test_training_pool_scales_between_min_and_max_nodes(ev):
    max_nodes = int(setting(ev, "maxNodes"))
    assert ev.value("num_nodes") == max_nodes
    pool = training_pool(ev)
    if ev.value("provider") == "gke":
        assert pool.inputs["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": max_nodes}
        assert pool.inputs["initialNodeCount"] == 0
    elif ev.value("provider") == "eks":
        assert pool.inputs["scalingConfig"]["maxSize"] == max_nodes
    else:
        workers = kind_config(ev)["nodes"][1:]
        assert len(workers) == max_nodes and {n["role"] for n in workers} == {"worker"}


def test_gpu_drivers_are_installed_and_device_plugin_only_where_missing(ev):
    gpus, kind = ev.value("gpus_per_node"), ev.value("provider")
    plugin = [r for r in ev.of_type("kubernetes:helm.sh/v3:Release") if "device-plugin" in r.name]
    assert bool(plugin) == (gpus > 0 and kind == "eks")
    if kind == "gke" and gpus:
        [accelerator] = training_pool(ev).inputs["nodeConfig"]["guestAccelerators"]
        driver = accelerator["gpuDriverInstallationConfig"]["gpuDriverVersion"]
        assert driver in ("DEFAULT", "LATEST")
    if plugin:
        values = plugin[0].inputs["values"]
        assert values["tolerations"] == ev.value("gpu_tolerations")
        assert values["nodeSelector"].items() <= pool_labels(ev).items()  # it reaches GPU nodes


def test_charts_are_pinned_to_exact_versions(ev):
    releases = ev.of_type("kubernetes:helm.sh/v3:Release")
    assert releases or ev.value("job_api") == "pytorchjob"
    for release in releases:
        assert re.fullmatch(r"\d+\.\d+\.\d+", release.inputs["version"]), release.name
        assert release.inputs["atomic"] is True and release.inputs["cleanupOnFail"] is True
    if ev.value("job_api") == "trainjob":
        trainer = ev.one("kubernetes:helm.sh/v3:Release", "-trainer")
        assert trainer.inputs["chart"] == "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
        assert trainer.inputs["version"].startswith("2.3.")
        assert trainer.inputs["values"]["runtimes"]["torchDistributed"]["enabled"] is True
        assert ev.value("training_runtime") == "torch-distributed"


def test_every_kubernetes_object_uses_the_cluster_provider_and_dies_with_it(ev):
    [provider] = ev.of_type("pulumi:providers:kubernetes")
    cluster_urn = cluster_resource(ev).urn
    objects = [r for r in ev.resources if r.type.startswith("kubernetes:")]
    assert len(objects) >= 5
    for obj in objects:
        assert obj.provider.startswith(provider.urn + "::"), obj.name
        assert obj.deleted_with == cluster_urn, obj.name
    assert json.loads(provider.inputs["kubeconfig"].value)["kind"] == "Config"


def test_every_resource_is_a_child_of_a_component(ev):
    stack_urn = f"urn:pulumi:{ev.stack}::stackbench::pulumi:pulumi:Stack::stackbench-{ev.stack}"
    top = {r.name for r in ev.resources if r.parent == stack_urn}
    assert all(r.type.startswith("stackbench:index:") for r in ev.resources if r.name in top)


def test_nothing_blocks_destroy(ev):
    for cluster in ev.of_type("gcp:container/cluster:Cluster"):
        assert cluster.inputs["deletionProtection"] is False
    for cluster in ev.of_type("eks:index:Cluster"):
        assert cluster.inputs.get("deletionProtection") in (None, False)
    for repo in ev.of_type("aws:ecr/repository:Repository"):
        assert repo.inputs["forceDelete"] is True
    buckets = ev.of_type("gcp:storage/bucket:Bucket") + ev.of_type("aws:s3/bucket:Bucket")
    assert all(b.inputs["forceDestroy"] is True for b in buckets)
    assert len(buckets) == (0 if ev.value("provider") == "kind" else 1)


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, Secret):
        yield from _strings(value.value)
    elif isinstance(value, str):
        yield value


def test_nothing_is_open_to_the_whole_internet(ev):
    for resource in ev.resources:
        assert not any("0.0.0.0/0" in s for s in _strings(resource.inputs)), resource.name
    allowed = [c for c in api_cidrs(ev)]
    if ev.value("provider") == "kind":
        assert kind_config(ev)["networking"]["apiServerAddress"] == "127.0.0.1"
    else:
        assert allowed and "0.0.0.0/0" not in allowed


def test_results_store_is_private_and_bound_to_the_job_service_account(ev):
    store, kind = ev.value("results_store"), ev.value("provider")
    [sa] = ev.of_type("kubernetes:core/v1:ServiceAccount")
    assert sa.inputs["metadata"]["name"] == ev.value("service_account")
    assert sa.inputs["metadata"]["namespace"] == ev.value("namespace")
    annotations = sa.inputs["metadata"].get("annotations", {})
    if kind == "gke":
        bucket = ev.one("gcp:storage/bucket:Bucket")
        assert store == f"gs://{bucket.name}-7f3a"
        assert bucket.inputs["publicAccessPrevention"] == "enforced"
        binding = ev.one("gcp:serviceaccount/iAMMember:IAMMember", "-wi")
        assert binding.inputs["member"].endswith("[stackbench/stackbench-runner]")
        writer = ev.one("gcp:serviceaccount/account:Account", "-writer")
        assert annotations["iam.gke.io/gcp-service-account"].startswith(
            writer.inputs["accountId"] + "@"
        )
    elif kind == "eks":
        assert store.startswith("s3://")
        role = ev.one("aws:iam/role:Role", "-writer")
        policy = json.loads(role.inputs["assumeRolePolicy"])
        [condition] = [s["Condition"]["StringEquals"] for s in policy["Statement"]]
        assert "system:serviceaccount:stackbench:stackbench-runner" in condition.values()
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


def cluster_resource(ev: Evaluation):
    return {
        "gke": lambda: ev.one("gcp:container/cluster:Cluster"),
        "eks": lambda: ev.one("eks:index:Cluster"),
        "kind": lambda: ev.one("command:local:Command", "-cluster"),
    }[ev.value("provider")]()


def kind_config(ev: Evaluation) -> dict:
    return json.loads(
        ev.one("command:local:Command", "-cluster").inputs["environment"]["KIND_CONFIG"]
    )


def api_cidrs(ev: Evaluation) -> list[str]:
    if ev.value("provider") == "gke":
        networks = ev.one("gcp:container/cluster:Cluster").inputs["masterAuthorizedNetworksConfig"]
        return [b["cidrBlock"] for b in networks["cidrBlocks"]]
    if ev.value("provider") == "eks":
        return ev.one("eks:index:Cluster").inputs["publicAccessCidrs"]
    return []


# --- variants of the stack files, as an operator would set them ------------------------


def test_api_cidrs_reach_the_cluster_exactly_as_configured():
    cidrs = ["203.0.113.0/28", "198.51.100.9/32"]
    for stack in ("gke-gpu-8", "eks-gpu-8"):
        ev = evaluate(stack, {"stackbench:apiAllowedCidrs": cidrs})
        assert api_cidrs(ev) == cidrs


def test_open_api_only_when_the_operator_lists_0_0_0_0():
    ev = evaluate("gke-cpu-16", {"stackbench:apiAllowedCidrs": ["0.0.0.0/0"]})
    assert api_cidrs(ev) == ["0.0.0.0/0"]


def test_pytorchjob_stack_installs_training_operator_instead_of_trainer():
    ev = evaluate("kind", {"stackbench:jobApi": "pytorchjob"})
    assert ev.value("job_api") == "pytorchjob"
    assert not ev.of_type("kubernetes:helm.sh/v3:Release")
    directory = ev.one("kubernetes:kustomize/v2:Directory")
    assert directory.inputs["directory"].endswith("/tree/v1.9.4/manifests/overlays/standalone")
    assert directory.deleted_with == cluster_resource(ev).urn


def test_spot_training_pool_when_asked():
    gke = training_pool(evaluate("gke-gpu-8", {"stackbench:spot": True}))
    assert gke.inputs["nodeConfig"]["spot"] is True
    eks = training_pool(evaluate("eks-gpu-8", {"stackbench:spot": True}))
    assert eks.inputs["capacityType"] == "SPOT"
