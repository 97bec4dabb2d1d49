"""Rendered TrainJob and PyTorchJob manifests: golden YAML, the upstream CRD schemas, and the
behaviour each field carries."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from runner.backends.kubernetes.render import render, to_yaml
from runner.backends.kubernetes.render.common import RUN_ID_LABEL
from runner.errors import SpecError
from runner.job.spec import Placement, resolve
from tests.runner.k8s_helpers import IMAGE, RUN_ID, make_spec, stack_connection

GOLDEN = Path(__file__).parent / "golden"
CRDS = Path(__file__).parents[3] / "shared" / "crds"
CRD_FILES = {
    "trainjob": "trainer.kubeflow.org_trainjobs.v2.3.0.yaml",
    "pytorchjob": "kubeflow.org_pytorchjobs.v1.9.4.yaml",
}


@functools.cache
def crd_schema(job_api: str) -> dict[str, Any]:
    path = CRDS / CRD_FILES[job_api]
    if not path.is_file():
        pytest.skip(f"upstream CRDs not found at {CRDS}")
    crd = yaml.safe_load(path.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize("store", ["gs://bench-results", "file:///srv/results", None])
def test_rendered_manifest_validates_against_the_upstream_crd(job_api: str, store: str | None):
    manifest = render(make_spec(), stack_connection(job_api, store))
    jsonschema.validate(manifest, crd_schema(job_api))


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
def test_rendered_manifest_matches_golden_yaml(job_api: str):
    text = to_yaml(render(make_spec(), stack_connection(job_api)))
    golden = GOLDEN / f"{job_api}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"rerun with UPDATE_GOLDEN=1 if intended: {golden}"


def test_trainjob_targets_the_torch_runtime_with_nodes_and_procs():
    spec = render(make_spec(nodes=3, procs=4), stack_connection("trainjob"))["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed"
    assert spec["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 4)
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "4"}
    assert trainer["image"] == IMAGE
    assert trainer["command"][0] == "torchrun"


def test_trainjob_args_carry_the_resolved_config_and_output_under_the_mount():
    args = render(make_spec(), stack_connection("trainjob"))["spec"]["trainer"]["args"]
    assert args[:3] == ["python", "-m", "workloads.train"]
    config = args[args.index("--config") + 1]
    assert '"seed": 7' in config
    assert args[args.index("--output-dir") + 1] == f"/results/{RUN_ID}"
    assert "--log-dir" not in args  # on Kubernetes, stdout is the log


def test_render_sets_worker_replicas_to_nodes_minus_one():
    replicas = render(make_spec(nodes=4), stack_connection("pytorchjob"))["spec"]
    assert replicas["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert replicas["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


def test_single_node_pytorchjob_has_no_worker_replicas():
    specs = render(make_spec(nodes=1), stack_connection("pytorchjob"))["spec"]
    assert set(specs["pytorchReplicaSpecs"]) == {"Master"}


def test_pytorchjob_wraps_the_workload_in_torchrun_with_the_operator_variables():
    job = render(make_spec(nodes=2, procs=3), stack_connection("pytorchjob"))
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["command"][:3] == ["torchrun", "--nnodes=2", "--nproc-per-node=3"]
    assert "--node-rank=$(RANK)" in container["command"]
    assert "--master-addr=$(MASTER_ADDR)" in container["command"]
    assert container["args"][:3] == ["python", "-m", "workloads.train"]
    assert job["spec"]["nprocPerNode"] == "3"


def test_pytorchjob_run_policy_keeps_pods_for_fetch_and_bounds_cost():
    policy = render(make_spec(), stack_connection("pytorchjob"))["spec"]["runPolicy"]
    assert policy["cleanPodPolicy"] == "None"
    assert policy["backoffLimit"] == 0
    assert policy["activeDeadlineSeconds"] == 6 * 3600
    assert policy["ttlSecondsAfterFinished"] > 0


def test_deadline_follows_the_time_budget_when_one_is_set():
    spec = make_spec()
    spec = dataclasses.replace(spec, config=spec.config.replace(time_budget_s=600.0))
    assert render(spec, stack_connection("trainjob"))["spec"]["activeDeadlineSeconds"] == 2400


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
@pytest.mark.parametrize(("sets", "deadline_s"), [((), 6 * 3600), (("time_budget_s=600",), 2400)])
def test_a_micro_benchmark_renders_with_the_deadline_of_its_run_limits(job_api, sets, deadline_s):
    spec = resolve("allreduce-micro", sets, Placement(2, 1, "cuda"), run_id=RUN_ID)
    manifest = render(spec, stack_connection(job_api))
    if job_api == "pytorchjob":
        assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == deadline_s
    else:
        assert manifest["spec"]["activeDeadlineSeconds"] == deadline_s
    assert "workloads.micro" in to_yaml(manifest)


def pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template (or pod patch) in a manifest, with its metadata."""
    if manifest["kind"] == "PyTorchJob":
        return [r["template"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]
    patch = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return [job["template"]["spec"]["template"] for job in patch["replicatedJobs"]]


@pytest.mark.parametrize("job_api", ["trainjob", "pytorchjob"])
def test_pods_get_gpu_scheduling_shm_non_root_and_labels(job_api: str):
    manifest = render(make_spec(), stack_connection(job_api))
    assert manifest["metadata"]["labels"][RUN_ID_LABEL] == RUN_ID
    for template in pod_specs(manifest):
        spec = template["spec"]
        assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
        assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["serviceAccountName"] == "stackbench-runner"
        shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        mounts = spec["containers"][0]["volumeMounts"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in mounts
        assert spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
        labels = template["metadata"]["labels"]
        assert labels["stackbench/benchmark"] == "cnn-digits"
        assert labels["app.kubernetes.io/instance"] == RUN_ID
        assert template["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}


@pytest.mark.parametrize(
    ("store", "source"),
    [("file:///srv/results", "hostPath"), ("s3://b", "persistentVolumeClaim"), (None, "emptyDir")],
)
def test_results_volume_follows_the_results_store(store: str | None, source: str):
    manifest = render(make_spec(), stack_connection("pytorchjob", store))
    volumes = pod_specs(manifest)[0]["spec"]["volumes"]
    assert source in next(v for v in volumes if v["name"] == "results")


def test_cpu_runs_land_on_the_training_pool_without_requesting_gpus():
    conn = stack_connection("trainjob")
    manifest = render(make_spec(device="cpu"), conn)
    assert "limits" not in manifest["spec"]["trainer"]["resourcesPerNode"]
    pod = pod_specs(manifest)[0]["spec"]
    assert pod["nodeSelector"] == dict(conn.node_selector)
    assert pod["tolerations"] == [dict(t) for t in conn.gpu_tolerations]


def test_render_refuses_more_nodes_than_the_stack_has():
    with pytest.raises(SpecError) as err:
        render(make_spec(nodes=5), stack_connection("trainjob"))
    assert err.value.param == "--nodes"
    assert "pulumi config set" in str(err.value)


def test_render_refuses_more_processes_than_gpus_per_node():
    with pytest.raises(SpecError) as err:
        render(make_spec(procs=8), stack_connection("trainjob"))
    assert err.value.param == "--workers"


def test_render_refuses_gpu_runs_on_a_cpu_stack():
    conn = dataclasses.replace(stack_connection(), gpus_per_node=0)
    with pytest.raises(SpecError, match="no GPUs"):
        render(make_spec(), conn)
