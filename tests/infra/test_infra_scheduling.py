"""The real infra program under Pulumi mocks, for every file in stacks/ (the cached `ev` fixture,
conftest.py): scheduling and pools. The GPU pool's taint is tolerated by the exported
toleration, the accelerator type and count follow the stack file, the training pool is sized by
the one pool rule, and GPU drivers are installed with the device plugin only where missing."""

from __future__ import annotations

import pytest
from infra_harness import REPO, Evaluation
from stack_reads import kind_config, setting

from contract.stackconfig import stackfiles
from contract.stackconfig.pools import training_pool

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
K8S_EFFECT = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def training_pool_resource(ev: Evaluation):
    kind = ev.value("provider")
    if kind == "gke":
        return ev.one("gcp:container/nodePool:NodePool", "-training")
    if kind == "eks":
        return ev.one("eks:index:ManagedNodeGroup", "-training")
    return None


def pool_taints(ev: Evaluation) -> list[dict]:
    pool = training_pool_resource(ev)
    if pool is None:
        return []
    taints = pool.inputs.get("nodeConfig", pool.inputs).get("taints", [])
    return [{**t, "effect": K8S_EFFECT[t["effect"]]} for t in taints]


def pool_labels(ev: Evaluation) -> dict:
    pool = training_pool_resource(ev)
    return {} if pool is None else pool.inputs.get("nodeConfig", pool.inputs).get("labels", {})


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' matching rule for one toleration and one taint."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value") == taint.get("value")


# ---- scheduling and pools ------------------------------------------------------------------


def test_gpu_pool_taint_is_tolerated_by_the_exported_toleration(ev):
    taints, tolerations = pool_taints(ev), ev.value("gpu_tolerations")
    if ev.value("gpus_per_node") == 0:
        assert taints == [] and tolerations == []
        assert ev.value("node_selector").items() <= pool_labels(ev).items()
        return
    assert taints, "a GPU pool must be tainted so CPU pods stay off it"
    for taint in taints:
        assert any(tolerates(t, taint) for t in tolerations), (taint, tolerations)
    assert ev.value("node_selector").items() <= pool_labels(ev).items()


def test_accelerator_type_and_count_follow_the_stack_file(ev):
    gpus = int(setting(ev, "gpusPerNode", "0"))
    pool = training_pool_resource(ev)
    if ev.value("provider") == "gke":
        accelerators = pool.inputs["nodeConfig"].get("guestAccelerators", [])
        expected = [(setting(ev, "gpuType"), gpus)] if gpus else []
        assert [(a["type"], a["count"]) for a in accelerators] == expected
    elif ev.value("provider") == "eks":
        ami = pool.inputs["amiType"]
        assert ami == ("AL2023_x86_64_NVIDIA" if gpus else "AL2023_x86_64_STANDARD")
        assert pool.inputs["instanceTypes"] == [setting(ev, "nodeMachineType")]


def test_training_pool_is_sized_by_the_one_pool_rule(ev):
    size = training_pool(stackfiles.load(REPO, ev.stack))
    pool = training_pool_resource(ev)
    if ev.value("provider") == "gke":
        assert pool.inputs["autoscaling"] == {
            "minNodeCount": size.min_nodes,
            "maxNodeCount": size.max_nodes,
        }
        assert pool.inputs["initialNodeCount"] == size.initial_nodes == size.min_nodes
    elif ev.value("provider") == "eks":
        assert pool.inputs["scalingConfig"] == {
            "minSize": size.min_nodes,
            "maxSize": size.max_nodes,
            "desiredSize": size.initial_nodes,
        }
        assert not size.autoscaled  # nothing would scale it: it holds maxNodes from `up` on
    else:
        workers = kind_config(ev)["nodes"][1:]
        assert len(workers) == size.max_nodes and {n["role"] for n in workers} == {"worker"}


def test_gpu_drivers_are_installed_and_device_plugin_only_where_missing(ev):
    gpus, kind = ev.value("gpus_per_node"), ev.value("provider")
    plugin = [r for r in ev.of_type("kubernetes:helm.sh/v3:Release") if "device-plugin" in r.name]
    assert bool(plugin) == (gpus > 0 and kind == "eks")
    if kind == "gke" and gpus:
        [accelerator] = training_pool_resource(ev).inputs["nodeConfig"]["guestAccelerators"]
        driver = accelerator["gpuDriverInstallationConfig"]["gpuDriverVersion"]
        assert driver in ("DEFAULT", "LATEST")
    if plugin:
        values = plugin[0].inputs["values"]
        assert values["tolerations"] == ev.value("gpu_tolerations")
        assert values["nodeSelector"].items() <= pool_labels(ev).items()
