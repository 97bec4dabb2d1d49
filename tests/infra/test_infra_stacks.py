"""The real infra program, run for every file in stacks/ under Pulumi mocks.

Each test reads what the program registered (types, inputs, provider, parent, deletedWith)
and the stack outputs as the engine receives them, and checks one promise of the runner
contract or of the issue: here the output contract, the job operator and its runtime,
bandwidth shaping, the language host and the stacks' plugins. Evaluations are cached per stack
(the `ev` fixture, conftest.py): one program run per stack file. Scheduling and pools are in
test_infra_scheduling.py, ownership and teardown in test_infra_ownership.py."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kustomize_target
import pytest
import yaml
from infra_harness import REPO, Evaluation, Secret, evaluate, stack_file_config
from stack_reads import STACKS, cluster_resource, setting

from contract.stack import (
    FINISHED_JOB_TTL_S,
    IMAGE_HOME,
    IMAGE_UID,
    OUTPUT_NAMES,
    RESULTS_MOUNT_PATH,
    SECRET_OUTPUTS,
    NodeResources,
    parse_outputs,
)
from contract.stackconfig import stackfiles
from contract.stackconfig.pools import training_pool
from infra import kind_bandwidth
from infra.shapes import node_job_resources
from tests.schemas import validate

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
RUNTIME_TYPE = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"


def plain_outputs(ev: Evaluation) -> dict:
    return {name: ev.value(name) for name in ev.outputs}


# ---- the output contract -----------------------------------------------------------------


def test_there_are_the_five_stacks_the_issue_names():
    assert {"kind", "gke-gpu-8", "eks-gpu-8", "gke-cpu-16"} <= set(STACKS)
    assert any(
        stack_file_config(s).get("stackbench:gpusPerNode") == "8"
        and stack_file_config(s).get("stackbench:maxNodes") == "1"
        for s in STACKS
    )


def test_stack_exports_exactly_the_contract_and_the_runner_check_accepts_it(ev):
    assert set(ev.outputs) == set(OUTPUT_NAMES)
    outputs = parse_outputs(plain_outputs(ev))  # the check runner/.../connection.py applies
    assert outputs.results_mount_path == RESULTS_MOUNT_PATH
    assert outputs.provider == setting(ev, "provider")


def test_the_kubeconfigs_are_the_only_secret_outputs(ev):
    secret = {name for name, value in ev.outputs.items() if isinstance(value, Secret)}
    assert secret == SECRET_OUTPUTS == {"kubeconfig", "runner_kubeconfig"}
    assert json.loads(ev.value("kubeconfig"))["kind"] == "Config"


def test_stack_settings_reach_the_outputs(ev):
    """Each setting an output carries comes from the stack's validated config, none is
    hard-coded (the job API, namespace, node counts and shapes, GPUs)."""
    cfg = stackfiles.load(REPO, ev.stack)
    resources = node_job_resources(cfg)
    assert ev.value("job_api") == cfg.job_api
    assert ev.value("namespace") == cfg.namespace
    assert ev.value("gpus_per_node") == cfg.gpus_per_node
    assert ev.value("num_nodes") == training_pool(cfg).max_nodes
    assert ev.value("node_job_resources") == (resources.__dict__ if resources else {})


@pytest.mark.parametrize(
    ("stack", "changes", "expected"),
    [
        ("kind", {"jobApi": "pytorchjob"}, {"job_api": "pytorchjob", "training_runtime": ""}),
        ("gke-gpu-8", {"jobApi": "pytorchjob"}, {"job_api": "pytorchjob"}),
        ("eks-gpu-8", {"namespace": "bench-a"}, {"namespace": "bench-a"}),
        ("gke-cpu-16", {"maxNodes": 3}, {"num_nodes": 3}),
        ("gke-gpu-8", {"gpusPerNode": 4}, {"gpus_per_node": 4}),
        ("kind", {"maxNodes": 5}, {"num_nodes": 5}),
        (
            "gke-cpu-16",
            {"nodeMachineType": "n2-standard-32"},
            {"node_job_resources": {"cpu_m": 31100, "memory_mib": 119892}},
        ),
    ],
)
def test_a_changed_setting_changes_its_output(stack, changes, expected):
    ev = evaluate(stack, {f"stackbench:{k}": v for k, v in changes.items()})
    assert {name: ev.value(name) for name in expected} == expected
    parse_outputs(plain_outputs(ev))


def test_image_is_pinned_by_digest_and_built_for_the_contract_user(ev):
    image = ev.value("image")
    assert re.fullmatch(r"[a-z0-9.:-]+(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}", image), image
    build = ev.one("docker-build:index:Image")
    assert build.inputs["push"] is True
    assert not any(tag.endswith(":latest") for tag in build.inputs["tags"])
    variant = "cuda" if ev.value("gpus_per_node") else "cpu"
    assert build.inputs["buildArgs"] == {
        "VARIANT": variant,
        "UID": str(IMAGE_UID),
        "HOME_DIR": IMAGE_HOME,
    }


# ---- the job operator and its runtime -----------------------------------------------------


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


def test_trainjob_stacks_install_the_runtime_they_export_with_a_ttl(ev):
    runtimes = ev.of_type(RUNTIME_TYPE)
    if ev.value("job_api") == "pytorchjob":
        assert runtimes == [] and ev.value("training_runtime") == ""
        return
    [runtime] = runtimes
    manifest = {k: runtime.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    validate(manifest)  # the upstream ClusterTrainingRuntime schema, strictly
    assert manifest["metadata"]["name"] == ev.value("training_runtime")
    assert manifest["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] == FINISHED_JOB_TTL_S
    [job] = manifest["spec"]["template"]["spec"]["replicatedJobs"]
    pod = job["template"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == ev.value("image")
    # What a TrainJob's patches cannot set, the runtime does (render/trainjob.py).
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    trainer = ev.one("kubernetes:helm.sh/v3:Release", "-trainer")
    assert trainer.urn in runtime.dependencies  # the chart brings the CRD


def test_pytorchjob_stack_installs_training_operator_instead_of_trainer():
    ev = evaluate("kind", {"stackbench:jobApi": "pytorchjob"})
    assert ev.value("job_api") == "pytorchjob"
    assert not ev.of_type("kubernetes:helm.sh/v3:Release") and not ev.of_type(RUNTIME_TYPE)
    directory = ev.one("kubernetes:kustomize/v2:Directory")
    target = kustomize_target.parse(directory.inputs["directory"])  # as kustomize reads it
    assert (target.repo_path, target.root_path) == (
        "kubeflow/training-operator",
        "manifests/overlays/standalone",
    )
    assert target.ref == "v1.9.4"
    assert directory.deleted_with == cluster_resource(ev).urn


def test_bandwidth_shaping_output_follows_the_pod_network(ev):
    shaping = ev.value("bandwidth_shaping")
    if ev.value("provider") == "eks":
        cni = cluster_resource(ev).inputs["vpcCniOptions"]["configurationValues"]
        assert cni["env"]["ENABLE_BANDWIDTH_PLUGIN"] == "true"
        assert shaping is True
    elif ev.value("provider") == "gke":
        assert shaping is False  # not documented to chain the bandwidth plugin
    else:
        assert shaping is True
        check_kind_chains_the_bandwidth_plugin(ev)


def check_kind_chains_the_bandwidth_plugin(ev: Evaluation) -> None:
    cluster = ev.one("command:local:Command", "-cluster")
    script = cluster.inputs["create"]
    node_image = kind_bandwidth.node_image(setting(ev, "kubernetesVersion"))
    # The node image with the plugin is built first, and the cluster runs it.
    assert script.index(f"docker build -t {node_image} ") < script.index("kind create cluster")
    assert f"kind create cluster --name stackbench-{ev.stack} --image {node_image} " in script
    # Every node gets kindnet's chain plus bandwidth, for its own pod CIDR and MTU, under a
    # name containerd reads before kindnet's 10-kindnet.conflist.
    start = script.index("for node in")
    loop = script[start : script.index("\ndone", start)]
    assert f"cp /dev/stdin {kind_bandwidth.CONFLIST}" in loop and "spec.podCIDR" in loop
    assert Path(kind_bandwidth.CONFLIST).name < "10-kindnet.conflist"
    template = cluster.inputs["environment"]["BANDWIDTH_CONFLIST"]
    conflist = json.loads(template % ("10.244.1.0/24", "1500"))
    assert conflist["name"] == "kindnet"  # one IPAM store with kindnet's own config
    assert [p["type"] for p in conflist["plugins"]] == ["ptp", "portmap", "bandwidth"]
    assert conflist["plugins"][2]["capabilities"] == {"bandwidth": True}
    ipam = conflist["plugins"][0]["ipam"]
    assert ipam["dataDir"] == "/run/cni-ipam-state" and ipam["ranges"] == [
        [{"subnet": "10.244.1.0/24"}]
    ]
    assert conflist["plugins"][0]["mtu"] == 1500


def test_kind_node_image_builds_the_bandwidth_plugin_from_a_pinned_commit():
    lines = [line.strip() for line in kind_bandwidth.NODE_DOCKERFILE.read_text().splitlines()]
    [go] = [line for line in lines if line.startswith("FROM golang:")]
    assert re.fullmatch(r"FROM golang:\d+\.\d+\.\d+-\w+ AS bandwidth", go), go
    [commit] = [line for line in lines if line.startswith("ARG CNI_PLUGINS_COMMIT=")]
    assert re.fullmatch(r"ARG CNI_PLUGINS_COMMIT=[0-9a-f]{40}", commit)
    assert "COPY --from=bandwidth /bandwidth /opt/cni/bin/bandwidth" in lines
    assert lines[-2] == "FROM ${NODE_IMAGE}"


def test_language_host_runs_the_program_as_a_package_without_path_changes():
    """What pulumi-language-python-exec does: chdir to the project, runpy.run_path("."). With
    no PYTHONPATH the program must import `infra` and get as far as reading its settings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import runpy; runpy.run_path('.', run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert "ConfigError: stackbench:provider is not set" in done.stderr, done.stderr[-2000:]
    for path in [REPO / "__main__.py", *Path(REPO, "infra").glob("*.py")]:
        imported = {
            alias.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert "sys" not in imported, path
    assert "main" not in yaml.safe_load((REPO / "Pulumi.yaml").read_text())


def test_node_job_resources_output_matches_the_shape_formula():
    cfg = stackfiles.load(REPO, "gke-gpu-8")  # n1-standard-8: 8 vCPU, 30 GiB
    assert node_job_resources(cfg) == NodeResources(cpu_m=7160, memory_mib=25561)


def test_the_stacks_plugins_reach_the_image_its_label_and_the_output(tmp_path):
    """config plugins -> the build's `plugins` context and label, and the `image_plugins`
    output the runner checks a run's plugins against (runner/job/image_plugins.py)."""
    package = tmp_path / "myplug"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    ev = evaluate("kind", {"stackbench:plugins": json.dumps([str(package)])})
    [carried] = ev.value("image_plugins")
    assert carried["name"] == carried["module"] == "myplug"
    build = ev.one("docker-build:index:Image")
    assert json.loads(build.inputs["labels"]["io.stackbench.plugins"]) == [carried]
    staged = Path(build.inputs["context"]["named"]["plugins"]["location"])
    assert json.loads((staged / "plugins.json").read_text()) == [carried]
    [parsed] = parse_outputs(plain_outputs(ev)).image_plugins
    assert parsed.source_sha256 == carried["source_sha256"]


def test_a_stack_older_than_the_image_plugins_output_carries_none(ev):
    outputs = plain_outputs(ev)
    del outputs["image_plugins"]
    assert parse_outputs(outputs).image_plugins == ()
