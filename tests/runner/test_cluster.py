"""Cluster connections: the stack-output contract (read through a fake `pulumi` on PATH), stack
names checked against stacks/ before `pulumi` runs, the --kubeconfig defaults, and the
kubeconfig's brief life on disk."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract.stack import OUTPUT_NAMES, NodeResources
from runner.backends.kubernetes.connection import connect, connect_reference, kubeconfig_file
from runner.errors import RunnerError, SpecError
from tests.runner.k8s_helpers import IMAGE

OUTPUTS: dict[str, Any] = {
    "kubeconfig": "apiVersion: v1\nkind: Config\n",  # the admin's: pulumi's, never the runner's
    "runner_kubeconfig": "apiVersion: v1\nkind: Config\nusers: [{name: stackbench-cli}]\n",
    "provider": "gke",
    "namespace": "bench",
    "job_api": "trainjob",
    "image": IMAGE,
    "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
    "gpu_tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "gpus_per_node": 4,
    "num_nodes": 2,
    "node_job_resources": {"cpu_m": 7160, "memory_mib": 25561},
    "results_store": "gs://bench-results",
    "results_mount_path": "/results",
    "service_account": "stackbench-runner",
    "training_runtime": "stackbench-torch-distributed",
    "bandwidth_shaping": False,
    "image_plugins": [],
}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install a `pulumi` on PATH that prints the given outputs and records its arguments."""

    def install(outputs: dict[str, Any] | None, exit_code: int = 0, stderr: str = "") -> Path:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (tmp_path / "outputs.json").write_text(json.dumps(outputs))
        script = bin_dir / "pulumi"
        script.write_text(
            "#!/bin/sh\n"
            f'echo "$@" > {tmp_path}/args\n'
            f'echo "{stderr}" >&2\n'
            f"cat {tmp_path}/outputs.json\n"
            f"exit {exit_code}\n"
        )
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
        return tmp_path / "args"

    return install


def test_stack_outputs_become_a_connection(fake_pulumi):
    args = fake_pulumi(OUTPUTS)
    conn = connect(stack="gke-gpu-8")
    assert args.read_text().split() == [
        "stack", "output", "--json", "--show-secrets", "--stack", "gke-gpu-8"
    ]  # fmt: skip
    assert (conn.namespace, conn.job_api, conn.gpus_per_node) == ("bench", "trainjob", 4)
    assert dict(conn.node_selector) == OUTPUTS["node_selector"]
    assert conn.results_store == "gs://bench-results"
    assert conn.node_job_resources == NodeResources(cpu_m=7160, memory_mib=25561)
    assert conn.bandwidth_shaping is False
    assert conn.training_runtime == "stackbench-torch-distributed"
    assert "apiVersion" not in repr(conn)  # the kubeconfig is a secret
    assert conn.kubeconfig == OUTPUTS["runner_kubeconfig"]  # the runner's own identity


def test_the_fixture_is_exactly_the_contract():
    assert set(OUTPUTS) == set(OUTPUT_NAMES)


def test_the_stacks_image_plugins_describe_its_own_image_only(fake_pulumi, tmp_path):
    """The stack's list is of its own image: with --image the plugins are not known, unless
    --image-plugins FILE says them (runner/job/image_plugins.py refuses a run otherwise)."""
    plugin = {"name": "mine", "version": None, "source_sha256": "a" * 64, "module": "mine"}
    fake_pulumi(OUTPUTS | {"image_plugins": [plugin]})
    assert [p.to_dict() for p in connect(stack="gke-gpu-8").image_plugins or ()] == [plugin]
    assert connect(stack="gke-gpu-8", image=IMAGE).image_plugins is None
    listed = tmp_path / "plugins.json"
    listed.write_text(json.dumps([plugin | {"source_sha256": "b" * 64}]))
    conn = connect(stack="gke-gpu-8", image=IMAGE, image_plugins=listed)
    assert [p.source_sha256 for p in conn.image_plugins or ()] == ["b" * 64]
    listed.write_text('[{"name": "mine"}]')
    with pytest.raises(SpecError, match=r"source_sha256 must be 64 hex"):
        connect(stack="gke-gpu-8", image=IMAGE, image_plugins=listed)
    with pytest.raises(SpecError, match="give --image too"):
        connect(stack="gke-gpu-8", image_plugins=listed)


def test_a_stack_that_cannot_tell_its_node_shape_connects_with_it_unknown(fake_pulumi):
    fake_pulumi(OUTPUTS | {"node_job_resources": {}, "provider": "kind"})
    assert connect(stack="kind").node_job_resources is None


def test_a_pytorchjob_stack_needs_no_training_runtime(fake_pulumi):
    fake_pulumi(OUTPUTS | {"job_api": "pytorchjob", "training_runtime": ""})
    assert connect(stack="gke-gpu-8").job_api == "pytorchjob"


def test_an_unknown_stack_fails_at_once_naming_the_stacks_without_running_pulumi(fake_pulumi):
    args = fake_pulumi(OUTPUTS)
    with pytest.raises(SpecError) as err:
        connect(stack="nosuch")
    assert err.value.param == "--stack"
    assert "(stacks: eks-gpu-8, gke-a100-1x8, gke-cpu-16, gke-gpu-8, kind)" in str(err.value)
    assert not args.exists()


def test_runner_submit_to_an_unknown_stack_is_a_usage_error_naming_the_stacks():
    """The whole command, as a person runs it: a fresh interpreter, one line, exit 2."""
    done = subprocess.run(
        [sys.executable, "-c", "from runner.cli import main; main()", "submit", "cnn-digits",
         "--stack", "nosuch"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "no stack 'nosuch'" in done.stderr and "gke-gpu-8" in done.stderr
    assert "Traceback" not in done.stderr


def test_job_api_option_overrides_the_stack_output(fake_pulumi):
    fake_pulumi(OUTPUTS)
    assert connect(stack="gke-gpu-8", job_api="pytorchjob").job_api == "pytorchjob"


@pytest.mark.parametrize(
    ("output", "value", "problem"),
    [
        ("kubeconfig", None, "is missing"),
        ("num_nodes", "2", "must be int"),
        ("gpus_per_node", True, "must be int"),
        ("job_api", "mpijob", "must be one of"),
        ("image", "ghcr.io/stackbench/train:latest", "not pinned"),
        ("results_store", "ftp://x", "gs://, s3:// or file:///"),
        ("gpu_tolerations", [{"key": "a"}, "b"], "toleration objects"),
        ("node_job_resources", {"cpu_m": 0, "memory_mib": 10}, "cpu_m must be at least 1"),
        ("node_job_resources", {"cpu": 2}, "exactly cpu_m and memory_mib"),
        ("bandwidth_shaping", "yes", "must be bool"),
        ("training_runtime", "", "is empty but job_api is trainjob"),
        ("results_store", "file://relative/dir", "file:///"),
    ],
)
def test_bad_stack_output_names_the_output_and_the_command(fake_pulumi, output, value, problem):
    outputs = dict(OUTPUTS)
    if value is None:
        del outputs[output]
    else:
        outputs[output] = value
    fake_pulumi(outputs)
    with pytest.raises(RunnerError) as err:
        connect(stack="gke-gpu-8")
    message = str(err.value)
    assert f"output {output!r}" in message and problem in message
    assert "pulumi stack output --json --stack gke-gpu-8" in message


def test_missing_pulumi_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunnerError, match=r"pulumi is not installed.*--kubeconfig"):
        connect(stack="gke-gpu-8")


def test_failing_pulumi_names_the_next_command(fake_pulumi):
    fake_pulumi(None, exit_code=255, stderr="error: no stack named 'kind' found")
    with pytest.raises(RunnerError, match=r"no stack named 'kind'.*pulumi stack ls"):
        connect(stack="kind")


def write_kubeconfig(path: Path, namespace: str | None = "team-a") -> Path:
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "main",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "main", "context": context},
                     {"name": "other", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    return path


def test_kubeconfig_defaults_to_the_context_namespace_and_trainjob(tmp_path: Path):
    conn = connect(kubeconfig=write_kubeconfig(tmp_path / "kc"), image="repo/train:1.0")
    assert (conn.namespace, conn.job_api, conn.provider) == ("team-a", "trainjob", "external")
    assert conn.gpus_per_node is None and conn.results_store is None
    assert not conn.node_selector


def test_kubeconfig_context_without_namespace_uses_default(tmp_path: Path):
    kc = write_kubeconfig(tmp_path / "kc")
    assert connect(kubeconfig=kc, context="other", image="r/t:1").namespace == "default"


def test_kubeconfig_needs_a_pinned_image(tmp_path: Path):
    kc = write_kubeconfig(tmp_path / "kc")
    with pytest.raises(SpecError) as err:
        connect(kubeconfig=kc)
    assert err.value.param == "--image"
    with pytest.raises(SpecError, match="not pinned"):
        connect(kubeconfig=kc, image="repo/train:latest")
    with pytest.raises(SpecError, match="not pinned"):
        connect(kubeconfig=kc, image="repo/train")


def test_unknown_context_lists_the_known_ones(tmp_path: Path):
    kc = write_kubeconfig(tmp_path / "kc")
    with pytest.raises(SpecError, match="contexts: main, other"):
        connect(kubeconfig=kc, context="prod", image="r/t:1")


@pytest.mark.parametrize(
    ("contexts", "problem"),
    [
        (["main"], "not a list of {name, context} objects"),
        ({"main": {}}, "not a list of {name, context} objects"),
        ([{"name": "main", "context": "team-a"}], "not a list of {name, context} objects"),
        ([{"name": "main", "context": {"namespace": ["team-a"]}}], "not a Kubernetes namespace"),
        ([{"name": "main", "context": {"namespace": "Team/../a"}}], "not a Kubernetes namespace"),
    ],
)
def test_a_damaged_kubeconfig_is_bad_input_naming_the_file(tmp_path: Path, contexts, problem):
    path = tmp_path / "kc"
    path.write_text(json.dumps({"current-context": "main", "contexts": contexts}))
    with pytest.raises(SpecError, match=re.escape(problem)) as err:
        connect(kubeconfig=path, image="r/t:1")
    assert err.value.param == "--kubeconfig" and str(path) in str(err.value)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xb9\x00\xffkind: Config\n", "not a kubeconfig (not UTF-8 text)"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b"current-context: main\ncontexts:\n- name: [main]\n", "not a list of {name, context}"),
        (b"current-context: [main]\ncontexts:\n- name: main\n", "no context None"),
    ],
    ids=["not-utf8", "deep", "list-name", "list-current"],
)
def test_a_kubeconfig_that_is_garbage_is_bad_input_not_a_traceback(tmp_path: Path, data, problem):
    path = tmp_path / "kc"
    path.write_bytes(data)
    with pytest.raises(SpecError, match=re.escape(problem)) as err:
        connect(kubeconfig=path, image="r/t:1")
    assert err.value.param == "--kubeconfig" and str(path) in str(err.value)


@pytest.mark.timeout(60)  # without the cap, /dev/zero is read until memory runs out
def test_a_kubeconfig_is_read_from_a_pipe_but_never_without_end():
    """`--kubeconfig <(pulumi stack output ...)` is a pipe, and works; /dev/zero given by
    mistake is refused at a cap instead of filling memory."""
    read, write = os.pipe()
    os.write(write, b"current-context: a\ncontexts:\n- name: a\n  context: {namespace: ns}\n")
    os.close(write)
    try:
        assert connect(kubeconfig=Path(f"/dev/fd/{read}"), image="r/t:1").namespace == "ns"
    finally:
        os.close(read)
    with pytest.raises(SpecError, match="far larger than a kubeconfig") as err:
        connect(kubeconfig=Path("/dev/zero"), image="r/t:1")
    assert err.value.param == "--kubeconfig"


def test_stack_and_kubeconfig_are_exclusive(tmp_path: Path):
    with pytest.raises(SpecError, match="not both"):
        connect(stack="kind", kubeconfig=tmp_path / "kc")


def test_reference_reconnects_to_the_same_cluster(tmp_path: Path):
    conn = connect(kubeconfig=write_kubeconfig(tmp_path / "kc"), context="other",
                   job_api="pytorchjob", image="r/t:1")  # fmt: skip
    ref = json.loads(json.dumps(conn.reference()))  # as stored in job.json
    assert "token" not in json.dumps(ref)
    again = connect_reference(ref)
    assert (again.namespace, again.job_api, again.image) == ("default", "pytorchjob", "r/t:1")


def test_kubeconfig_file_is_private_and_removed_after_use(fake_pulumi):
    fake_pulumi(OUTPUTS)
    conn = connect(stack="gke-gpu-8")
    with kubeconfig_file(conn) as (path, directory):
        assert path.read_text() == OUTPUTS["runner_kubeconfig"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert not path.exists() and not directory.exists()
