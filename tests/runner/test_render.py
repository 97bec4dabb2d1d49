"""Rendered TrainJob and PyTorchJob manifests: golden YAML, the upstream CRD schemas (vendored in
tests/schemas, read strictly), the pod rules every benchmark's manifest keeps on both job APIs,
the job-level fields each API carries (runtime, replicas, torchrun, run policy, deadline), and
elastic specs. What pods ask of the nodes and the network is in test_render_resources.py, the
workload's command line through Kubernetes' expansion in test_render_argv.py."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from contract.stack import FINISHED_JOB_TTL_S, IMAGE_HOME, IMAGE_UID
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.render import render, to_yaml
from runner.errors import SpecError
from runner.job.benchmarks import BENCHMARKS
from runner.job.spec import JobSpec, Placement, resolve
from tests.runner.k8s_helpers import IMAGE, RUN_ID, make_spec, stack_connection
from tests.runner.manifests import (
    JOB_APIS,
    node_resources,
    pod_templates,
    shaped,
    spec_of,
    with_link,
)
from tests.schemas import validate

GOLDEN = Path(__file__).parent / "golden"


# ---- every benchmark, both job APIs: the schema and the pod rules ---------------------------


@pytest.mark.parametrize("job_api", JOB_APIS)
@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("benchmark", sorted(BENCHMARKS))
def test_every_benchmarks_manifest_fits_the_crd_and_keeps_every_pod_rule(
    benchmark: str, device: str, job_api: str
):
    conn = shaped(job_api)
    manifest = render(with_link(spec_of(benchmark, device), "100mbit"), conn)
    validate(manifest)
    for template in pod_templates(manifest):
        check_pod_rules(template, conn)
    for resources in node_resources(manifest):
        assert resources["requests"] == resources["limits"]  # Guaranteed QoS on a known shape
        assert {"cpu", "memory"} <= resources["limits"].keys()
        assert ("nvidia.com/gpu" in resources["limits"]) == (device == "cuda")
    if job_api == "pytorchjob":
        assert manifest["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == FINISHED_JOB_TTL_S
    else:  # the TTL is the stack runtime's (tests/infra checks it carries FINISHED_JOB_TTL_S)
        assert manifest["spec"]["runtimeRef"]["name"] == conn.training_runtime


def check_pod_rules(template: dict[str, Any], conn: ClusterConnection) -> None:
    spec = template["spec"]
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == pod_security["runAsGroup"] == IMAGE_UID
    assert pod_security["fsGroup"] == IMAGE_UID
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = spec["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert set(mounts) == {"/dev/shm", "/tmp", IMAGE_HOME, conn.results_mount_path}
    for path in ("/dev/shm", "/tmp", IMAGE_HOME):
        assert "emptyDir" in mounts[path] and mounts[path]["emptyDir"]["sizeLimit"]
    if "automountServiceAccountToken" in spec or "enableServiceLinks" in spec:  # PyTorchJob
        assert spec["automountServiceAccountToken"] is False
        assert spec["enableServiceLinks"] is False
    assert spec["serviceAccountName"] == conn.service_account
    annotations = template["metadata"]["annotations"]
    assert annotations["kubernetes.io/ingress-bandwidth"] == "100M"
    assert annotations["kubernetes.io/egress-bandwidth"] == "100M"


@pytest.mark.parametrize("job_api", JOB_APIS)
@pytest.mark.parametrize("store", ["gs://bench-results", "file:///srv/results", "s3://b", None])
def test_manifest_fits_the_crd_whatever_the_results_store(job_api: str, store: str | None):
    validate(render(make_spec(), stack_connection(job_api, store)))


@pytest.mark.parametrize("job_api", JOB_APIS)
def test_the_strict_schema_refuses_a_field_the_api_server_would_drop(job_api: str):
    manifest = render(make_spec(), stack_connection(job_api))
    pod_templates(manifest)[0]["spec"]["containers"][0]["notAField"] = True
    with pytest.raises(Exception, match="notAField"):
        validate(manifest)


@pytest.mark.parametrize("job_api", JOB_APIS)
def test_rendered_manifest_matches_golden_yaml(job_api: str):
    text = to_yaml(render(with_link(make_spec(), "250mbit"), shaped(job_api)))
    golden = GOLDEN / f"{job_api}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"rerun with UPDATE_GOLDEN=1 if intended: {golden}"


# ---- the rest of the manifest ------------------------------------------------------------------


def test_trainjob_targets_the_stack_runtime_with_nodes_and_procs():
    spec = render(make_spec(nodes=3, procs=4), stack_connection("trainjob"))["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed"  # the connection's, as given
    assert spec["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 4)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "4"
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
    assert policy["activeDeadlineSeconds"] == 6 * 3600
    assert policy["ttlSecondsAfterFinished"] == FINISHED_JOB_TTL_S


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


# ---- elastic specs (--workers MIN:MAX) ------------------------------------------------------


def elastic_spec(low: int = 2, high: int = 4) -> JobSpec:
    placement = Placement(num_nodes=high, procs_per_node=1, device="cpu", min_workers=low)
    return resolve("cnn-digits", ["strategy=allreduce"], placement, run_id=RUN_ID)


def test_an_elastic_pytorchjob_has_an_elastic_policy_and_fits_the_crd():
    manifest = render(elastic_spec(2, 4), stack_connection("pytorchjob"))
    validate(manifest)
    spec = manifest["spec"]
    assert spec["elasticPolicy"] == {
        "minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 0,
    }  # fmt: skip
    # Workers only (the operator's rendezvous endpoint is worker 0), MAX of them, none restarted.
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "Never"
    # Each pod is one elastic worker started directly: torchrun's agent would restart them all.
    container = worker["template"]["spec"]["containers"][0]
    assert "torchrun" not in container["command"] and "args" not in container
    assert container["command"][:3] == ["python", "-m", "workloads.train"]
    assert container["command"][container["command"].index("--elastic") + 1] == "2:4"


def test_no_pytorchjob_has_a_backoff_limit_so_a_failure_leaves_the_pods_and_their_logs():
    """training-operator 1.9 deletes every pod of a job whose new failure exceeds its
    backoffLimit (ReconcileJobs), cleanPodPolicy notwithstanding: the failing rank's log (the
    run's reason) and an elastic run's survivors would go with them."""
    for spec in (elastic_spec(), make_spec()):
        policy = render(spec, stack_connection("pytorchjob"))["spec"]["runPolicy"]
        assert "backoffLimit" not in policy and policy["cleanPodPolicy"] == "None"
        assert policy["activeDeadlineSeconds"] > 0 and policy["ttlSecondsAfterFinished"] > 0


def test_a_fixed_pytorchjob_has_no_elastic_policy():
    assert "elasticPolicy" not in render(make_spec(), stack_connection("pytorchjob"))["spec"]


def test_trainjob_refuses_an_elastic_spec_naming_the_pytorchjob_api():
    with pytest.raises(SpecError, match=r"has no elastic policy.*--job-api pytorchjob"):
        render(elastic_spec(), stack_connection("trainjob"))
