"""Rendered TrainJob and PyTorchJob manifests: golden YAML, the upstream CRD schemas (vendored in
tests/schemas, read strictly), the pod rules every benchmark's manifest keeps on both job APIs,
the resource formula, bandwidth annotations, and the behaviour each field carries."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.stack import FINISHED_JOB_TTL_S, IMAGE_HOME, IMAGE_UID, NodeResources
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.render import render, to_yaml
from runner.backends.kubernetes.render.common import RUN_ID_LABEL
from runner.backends.kubernetes.render.resources import UNKNOWN_LIMIT, UNKNOWN_REQUEST
from runner.errors import SpecError
from runner.job.benchmarks import BENCHMARKS
from runner.job.spec import JobSpec, Placement, resolve, workload_argv
from tests.runner.k8s_helpers import IMAGE, RUN_ID, make_spec, stack_connection
from tests.schemas import validate

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).resolve().parents[2]
JOB_APIS = ("trainjob", "pytorchjob")
NODE = NodeResources(cpu_m=47000, memory_mib=180000)  # a 4-GPU node's job resources


def shaped(job_api: str = "trainjob", store: str | None = "gs://bench-results", **changes: Any):
    """A stack connection that knows its node shape and shapes bandwidth."""
    conn = stack_connection(job_api, store)
    fields = {"node_job_resources": NODE, "bandwidth_shaping": True} | changes
    return dataclasses.replace(conn, **fields)


def spec_of(benchmark: str, device: str) -> JobSpec:
    overrides = [] if benchmark == "allreduce-micro" else ["seed=7"]
    placement = Placement(num_nodes=2, procs_per_node=2, device=device)  # type: ignore[arg-type]
    return resolve(benchmark, overrides, placement, run_id=f"b{len(benchmark)}-20300101-beef")


def pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template (or pod patch) in a manifest, with its metadata."""
    if manifest["kind"] == "PyTorchJob":
        return [r["template"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]
    patch = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return [job["template"]["spec"]["template"] for job in patch["replicatedJobs"]]


def node_resources(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    if manifest["kind"] == "TrainJob":
        return [manifest["spec"]["trainer"]["resourcesPerNode"]]
    return [t["spec"]["containers"][0]["resources"] for t in pod_templates(manifest)]


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


# ---- resources -------------------------------------------------------------------------------


def test_a_gpu_run_takes_the_share_of_the_node_its_gpus_are():
    conn = shaped()  # 4 GPUs per node
    one = render(make_spec(nodes=1, procs=1), conn)["spec"]["trainer"]["resourcesPerNode"]
    assert one["limits"] == {"cpu": "11750m", "memory": "45000Mi", "nvidia.com/gpu": "1"}
    full = render(make_spec(nodes=1, procs=4), conn)["spec"]["trainer"]["resourcesPerNode"]
    assert full["limits"] == {"cpu": "47000m", "memory": "180000Mi", "nvidia.com/gpu": "4"}
    assert full["requests"] == full["limits"]


def test_a_cpu_run_takes_a_core_share_per_process():
    conn = shaped(gpus_per_node=0, gpu_tolerations=())
    manifest = render(make_spec(nodes=1, procs=4, device="cpu"), conn)
    [resources] = node_resources(manifest)
    # 4 of 47 whole cores.
    assert resources["limits"] == {"cpu": "4000m", "memory": "15319Mi"}
    assert "nvidia.com/gpu" not in resources["requests"]


def test_more_processes_than_cores_still_fit_the_node():
    conn = shaped(node_job_resources=NodeResources(cpu_m=3170, memory_mib=13283))
    manifest = render(make_spec(nodes=1, procs=8, device="cpu"), conn)
    assert node_resources(manifest)[0]["limits"] == {"cpu": "3170m", "memory": "13283Mi"}


@pytest.mark.parametrize("job_api", JOB_APIS)
def test_an_unknown_node_shape_gets_per_process_defaults_with_limits(job_api: str):
    conn = stack_connection(job_api)  # node_job_resources unknown, as with --kubeconfig
    manifest = render(make_spec(nodes=2, procs=3), conn)
    for resources in node_resources(manifest):
        assert resources["requests"] == {
            "cpu": f"{3 * UNKNOWN_REQUEST.cpu_m}m",
            "memory": f"{3 * UNKNOWN_REQUEST.memory_mib}Mi",
            "nvidia.com/gpu": "3",
        }
        assert resources["limits"] == {
            "cpu": f"{3 * UNKNOWN_LIMIT.cpu_m}m",
            "memory": f"{3 * UNKNOWN_LIMIT.memory_mib}Mi",
            "nvidia.com/gpu": "3",
        }


# ---- bandwidth -------------------------------------------------------------------------------


@pytest.mark.parametrize(("link", "rate"), [("1gbit", "1000M"), ("2500kbit", "2500k"),
                                             ("100kbit", "100k")])  # fmt: skip
def test_link_rate_becomes_both_bandwidth_annotations_and_the_pods_network_record(link, rate):
    manifest = render(with_link(make_spec(), link), shaped("pytorchjob", None))
    for template in pod_templates(manifest):
        assert template["metadata"]["annotations"] == {
            "kubernetes.io/ingress-bandwidth": rate,
            "kubernetes.io/egress-bandwidth": rate,
        }
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        record = json.loads(env["STACKBENCH_NETWORK"])
        assert record["link"] == link and record["method"] == "pod annotations; not measured"


def test_no_link_rate_no_bandwidth_annotations():
    manifest = render(make_spec(), shaped("pytorchjob", None))
    assert all("annotations" not in t["metadata"] for t in pod_templates(manifest))


@pytest.mark.parametrize(("shaping", "why"), [(False, "does not"), (None, "cannot tell")])
def test_a_link_rate_is_refused_where_the_network_would_ignore_it(shaping, why):
    with pytest.raises(SpecError) as err:
        render(with_link(make_spec(), "100mbit"), shaped(bandwidth_shaping=shaping))
    assert err.value.param == "--link" and why in str(err.value)


@pytest.mark.parametrize("job_api", ["pytorchjob", "trainjob"])
def test_a_delay_or_loss_is_refused_on_a_cluster_in_one_line_naming_why(job_api):
    # Even on a network that enforces the rate: recorded delayed, the run would not have been.
    with pytest.raises(SpecError) as err:
        render(with_link(make_spec(), "100mbit,delay=5ms"), shaped(job_api, None))
    said = str(err.value)
    assert err.value.param == "--link" and "\n" not in said
    assert said.startswith("100mbit,delay=5ms: a cluster cannot add delay, jitter or loss (")
    assert "give the rate alone (100mbit)" in said


def with_link(spec: JobSpec, link: str) -> JobSpec:
    return dataclasses.replace(spec, placement=dataclasses.replace(spec.placement, link=link))


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


@pytest.mark.parametrize("job_api", JOB_APIS)
def test_pods_get_gpu_scheduling_and_labels(job_api: str):
    manifest = render(make_spec(), stack_connection(job_api))
    assert manifest["metadata"]["labels"][RUN_ID_LABEL] == RUN_ID
    for template in pod_templates(manifest):
        spec = template["spec"]
        assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
        assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
        labels = template["metadata"]["labels"]
        assert labels["stackbench/benchmark"] == "cnn-digits"
        assert labels["app.kubernetes.io/instance"] == RUN_ID
        assert template["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}


def test_the_bucket_is_mounted_as_the_pods_user():
    manifest = render(make_spec(), stack_connection("pytorchjob", "gs://bench-results"))
    [results] = [v for v in pod_templates(manifest)[0]["spec"]["volumes"] if v["name"] == "results"]
    attributes = results["csi"]["volumeAttributes"]
    assert attributes["bucketName"] == "bench-results"
    assert f"uid={IMAGE_UID}" in attributes["mountOptions"].split(",")
    assert f"gid={IMAGE_UID}" in attributes["mountOptions"].split(",")


@pytest.mark.parametrize(
    ("store", "source"),
    [("file:///srv/results", "hostPath"), ("s3://b", "persistentVolumeClaim"), (None, "emptyDir")],
)
def test_results_volume_follows_the_results_store(store: str | None, source: str):
    manifest = render(make_spec(), stack_connection("pytorchjob", store))
    volumes = pod_templates(manifest)[0]["spec"]["volumes"]
    assert source in next(v for v in volumes if v["name"] == "results")


def test_cpu_runs_land_on_the_training_pool_without_requesting_gpus():
    conn = stack_connection("trainjob")
    manifest = render(make_spec(device="cpu"), conn)
    assert "nvidia.com/gpu" not in manifest["spec"]["trainer"]["resourcesPerNode"]["limits"]
    pod = pod_templates(manifest)[0]["spec"]
    assert pod["nodeSelector"] == dict(conn.node_selector)
    assert pod["tolerations"] == [dict(t) for t in conn.gpu_tolerations]


def test_render_refuses_more_nodes_than_the_stack_has():
    with pytest.raises(SpecError) as err:
        render(make_spec(nodes=5), stack_connection("trainjob"))
    assert err.value.param == "--workers"
    # The fix sets the stack's real setting (a key Pulumi.yaml declares), for that stack.
    command = str(err.value).split("grow the stack (", 1)[1].split(" && ")[0]
    assert shlex.split(command) == [
        "pulumi", "config", "set", "stackbench:maxNodes", "5", "--stack", "gke-gpu-8"
    ]  # fmt: skip
    declared = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]
    assert "maxNodes" in declared


def test_a_cluster_made_elsewhere_is_not_told_to_grow_a_stack():
    conn = dataclasses.replace(stack_connection("trainjob"), stack=None, kubeconfig_path="/k")
    with pytest.raises(SpecError) as err:
        render(make_spec(nodes=5), conn)
    assert "pulumi" not in str(err.value)


def kubernetes_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of a container's command and args: Kubernetes' $(VAR) expansion
    (k8s.io/kubernetes third_party/forked/golang/expansion, Expand), ported line for line:
    `$$` is a literal `$`, `$(NAME)` the variable's value when it is defined, left as it is
    when it is not, and `$` before anything else stays."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(" and ")" in rest:
                name = rest[1 : rest.index(")")]
                out.append(env.get(name, f"$({name})"))
                advance = rest.index(")") + 1
            elif rest[0] == "(":
                out.append("$(")
                advance = 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def test_the_port_of_kubernetes_expansion_reads_as_upstream_tests_say():
    env = {"VAR_A": "A", "VAR_EMPTY": ""}
    cases = {  # from upstream's expand_test.go
        "$(VAR_A)": "A", "___$(VAR_A)___": "___A___", "$(VAR_EMPTY)": "",
        "$$(VAR_A)": "$(VAR_A)", "$$$(VAR_A)": "$A", "$(VAR_DNE)": "$(VAR_DNE)",
        "$$$$$$(BIG_MONEY)": "$$$(BIG_MONEY)", "$(VAR_A": "$(VAR_A", "$VAR_A": "$VAR_A",
        "f000-$$VAR_A": "f000-$VAR_A", "$": "$", "$$": "$", "$$$": "$$",
    }  # fmt: skip
    assert {text: kubernetes_expand(text, env) for text in cases} == cases


@pytest.mark.parametrize(
    ("job_api", "elastic"), [("trainjob", False), ("pytorchjob", False), ("pytorchjob", True)]
)
def test_the_workload_gets_its_config_as_recorded_whatever_dollars_it_holds(job_api, elastic):
    """A --set value travels in the container's args (or command), where the kubelet expands
    $(VAR) from the container's environment and turns $$ into $: unescaped, the workload would
    run with another config than job.json records, and a different one on every node."""
    data_dir = "/data/$(RANK)/$(PET_NODE_RANK)/$(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)/a$$b$"
    placement = Placement(
        num_nodes=2, procs_per_node=1, device="cpu", min_workers=1 if elastic else None
    )
    overrides = [
        f"data_dir={data_dir}",
        *(["strategy=allreduce", "compile_model=false"] if elastic else []),
    ]
    spec = resolve("resnet20-cifar10", overrides, placement, run_id=RUN_ID)
    manifest = render(spec, stack_connection(job_api))
    if job_api == "trainjob":
        container = manifest["spec"]["trainer"]
    else:
        container = next(iter(pod_templates(manifest)))["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    env |= {"RANK": "1", "PET_NODE_RANK": "1", "MASTER_ADDR": "job-master-0"}  # the operators'
    argv = container.get("args") or container["command"]
    expanded = [kubernetes_expand(arg, env) for arg in argv]
    config = json.loads(expanded[expanded.index("--config") + 1])
    assert config["data"]["data_dir"] == data_dir == spec.config.to_dict()["data"]["data_dir"]
    assert expanded == workload_argv(spec, output_dir=f"/results/{RUN_ID}", python="python")


def test_render_refuses_more_processes_than_gpus_per_node():
    with pytest.raises(SpecError) as err:
        render(make_spec(procs=8), stack_connection("trainjob"))
    assert err.value.param == "--workers"


def test_render_refuses_gpu_runs_on_a_cpu_stack():
    conn = dataclasses.replace(stack_connection(), gpus_per_node=0)
    with pytest.raises(SpecError, match="no GPUs"):
        render(make_spec(), conn)


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
