"""What a rendered job's pods ask of the cluster: the resource formula (a GPU run's share of its
node, a CPU run's cores, defaults on an unknown node shape), bandwidth annotations and the
refusals of link shaping a network would ignore, GPU scheduling and labels, the results volume,
the node pools, and the refusals of what the stack cannot hold."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
import yaml

from contract.stack import IMAGE_UID, NodeResources
from runner.backends.kubernetes.render import render
from runner.backends.kubernetes.render.common import RUN_ID_LABEL
from runner.backends.kubernetes.render.resources import UNKNOWN_LIMIT, UNKNOWN_REQUEST
from runner.errors import SpecError
from tests.runner.k8s_helpers import RUN_ID, make_spec, stack_connection
from tests.runner.manifests import JOB_APIS, node_resources, pod_templates, shaped, with_link

REPO = Path(__file__).resolve().parents[2]


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


def test_render_refuses_more_processes_than_gpus_per_node():
    with pytest.raises(SpecError) as err:
        render(make_spec(procs=8), stack_connection("trainjob"))
    assert err.value.param == "--workers"


def test_render_refuses_gpu_runs_on_a_cpu_stack():
    conn = dataclasses.replace(stack_connection(), gpus_per_node=0)
    with pytest.raises(SpecError, match="no GPUs"):
        render(make_spec(), conn)
