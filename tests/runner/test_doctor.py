"""`runner doctor` names each missing step of docs/clusters.md, with its fix, one line each.

The tools it asks are real executables this test writes into a folder that is the whole PATH:
shell scripts that answer the commands the doctor runs as the real CLIs do (`pulumi whoami`
prints the user, `pulumi stack ls --json` a list of {"name": ...}, `gcloud services list
--format=value(config.name)` one API a line, `gcloud compute regions describe --format=json`
the region with its `quotas`, `aws service-quotas get-service-quota` {"Quota": {"Value":
...}}). Where they differ: they answer only those commands, from the test's own data, and
never reach a cloud. The project is a copy of Pulumi.yaml with the test's stack files, and
its .venv/bin/python a script that answers the doctor's probe with the modules it lacks.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import main

REPO = Path(__file__).resolve().parents[2]

PULUMI = """#!/bin/sh
case "$*" in
  version) echo v3.190.0 ;;
  "whoami --non-interactive") [ -n "$LOGGED_IN" ] && echo alice || {
    echo "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions" >&2
    exit 255; } ;;
  "stack ls --json --non-interactive") echo "[$STACKS]" ;;
  "stack output --json --stack "*) echo "${OUTPUTS:-{\\}}" ;;
  *) echo "unexpected: pulumi $*" >&2; exit 2 ;;
esac
"""
DOCKER = "#!/bin/sh\necho 28.3.2\n"
KIND = '#!/bin/sh\necho "kind v0.29.0 go1.24.2 linux/amd64"\n'
KUBECTL = '#!/bin/sh\necho "Client Version: v1.33.1"\n'
GCLOUD = """#!/bin/sh
case "$*" in
  version) echo "Google Cloud SDK 530.0.0" ;;
  "config get-value project") echo "${GCP_PROJECT:-(unset)}" ;;
  "services list --enabled --project "*) printf '%s\\n' $ENABLED ;;
  "compute regions describe "*) echo "{\\"name\\": \\"us-central1\\", \\"quotas\\": [
    {\\"metric\\": \\"CPUS\\", \\"limit\\": 24.0, \\"usage\\": 0.0},
    {\\"metric\\": \\"NVIDIA_T4_GPUS\\", \\"limit\\": $T4_LIMIT, \\"usage\\": 0.0}]}" ;;
  *) echo "unexpected: gcloud $*" >&2; exit 2 ;;
esac
"""
AUTH_PLUGIN = '#!/bin/sh\necho "Kubernetes v1.30.0+03fcd0f8"\n'
AWS = """#!/bin/sh
case "$*" in
  --version) echo "aws-cli/2.27.0 Python/3.13.3 Linux/6.1 exe/x86_64" ;;
  "sts get-caller-identity --output json") echo '{"Account": "123456789012"}' ;;
  "service-quotas get-service-quota --service-code ec2 --quota-code L-DB2E81BA "*)
    echo "{\\"Quota\\": {\\"QuotaCode\\": \\"L-DB2E81BA\\", \\"Value\\": $G_VCPUS}}" ;;
  *) echo "unexpected: aws $*" >&2; exit 2 ;;
esac
"""
ALL_APIS = (
    "compute.googleapis.com container.googleapis.com artifactregistry.googleapis.com "
    "storage.googleapis.com iam.googleapis.com cloudresourcemanager.googleapis.com"
)
TOOLS = {
    "pulumi": PULUMI, "docker": DOCKER, "kind": KIND, "kubectl": KUBECTL, "gcloud": GCLOUD,
    "gke-gcloud-auth-plugin": AUTH_PLUGIN, "aws": AWS,
}  # fmt: skip
CIDRS = "  stackbench:apiAllowedCidrs:\n    - 203.0.113.7/32\n"


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A stackbench folder (Pulumi.yaml, the repository's stack files, a .venv whose python
    lacks what $VENV_ABSENT names), the working directory."""
    root = tmp_path / "project"
    (root / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root)
    for stack_file in (REPO / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(stack_file, root / "stacks")
    _executable(root / ".venv" / "bin" / "python", '#!/bin/sh\necho "$VENV_ABSENT"\n')
    monkeypatch.chdir(root)
    return root


def _bin(tmp_path: Path, *names: str) -> str:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name in names:
        _executable(folder / name, TOOLS[name])
    return str(folder)


def _doctor(tmp_path: Path, path: str, *args: str, results: str = "results", **env: str):
    adc = tmp_path / "adc.json"
    adc.write_text("{}")
    environment = {"PATH": path, "LOGGED_IN": "1", "STACKS": "", "VENV_ABSENT": "",
                   "GOOGLE_APPLICATION_CREDENTIALS": str(adc), "ENABLED": ALL_APIS,
                   "T4_LIMIT": "8.0", "G_VCPUS": "32.0", **env}  # fmt: skip
    result = CliRunner().invoke(
        main, ["--results-dir", str(tmp_path / results), "doctor", *args], env=environment
    )
    return result.exit_code, result.output.splitlines()


def _line(lines: list[str], step: str) -> str:
    (line,) = [x for x in lines if step in x]
    return line


def test_a_kind_stack_with_every_step_done_is_ready(tmp_path, project):
    path = _bin(tmp_path, "pulumi", "docker", "kind", "kubectl")
    outputs = '{"kubeconfig": "[secret]"}'
    code, lines = _doctor(tmp_path, path, "--stack", "kind",
                          STACKS='{"name": "kind"}', OUTPUTS=outputs)  # fmt: skip
    assert code == 1  # deployed but with outputs missing: `pulumi up` not done
    assert "fix: pulumi up --stack kind" in _line(lines, "stack deployed")
    assert all(x.startswith("ok ") for x in lines if "stack deployed" not in x), lines
    from contract.stack import OUTPUT_NAMES

    every = "{" + ", ".join(f'"{name}": "x"' for name in OUTPUT_NAMES) + "}"
    code, lines = _doctor(tmp_path, path, "--stack", "kind",
                          STACKS='{"name": "org/kind"}', OUTPUTS=every)  # fmt: skip
    assert code == 0, lines
    assert lines[-1] == "ready: runner submit cnn-digits --stack kind"
    assert "pulumi installed: v3.190.0" in _line(lines, "pulumi installed")


def test_on_a_bare_machine_each_missing_tool_is_one_line_with_its_install(tmp_path, project):
    code, lines = _doctor(tmp_path, _bin(tmp_path), "--stack", "kind")
    assert code == 1
    assert "fix: curl -fsSL https://get.pulumi.com | sh" in _line(lines, "pulumi installed")
    assert "MISSING docker installed: not on PATH; fix: install Docker" in "\n".join(lines)
    assert "fix: install kind" in _line(lines, "kind installed")
    assert _line(lines, "kubectl").startswith("optional kubectl installed: not on PATH")
    assert not [x for x in lines if "logged in" in x or "deployed" in x]  # need pulumi first
    assert all(x.startswith(("ok ", "MISSING ", "optional ")) for x in lines), lines


def test_login_the_stack_and_the_infra_extra_are_named_with_their_commands(tmp_path, project):
    path = _bin(tmp_path, "pulumi", "docker", "kind", "kubectl")
    code, lines = _doctor(tmp_path, path, "--stack", "kind", LOGGED_IN="", VENV_ABSENT="")
    assert code == 1
    line = _line(lines, "pulumi logged in")
    assert "PULUMI_ACCESS_TOKEN must be set" in line and "fix: pulumi login" in line
    code, lines = _doctor(tmp_path, path, "--stack", "kind", STACKS='{"name": "gke-gpu-8"}',
                          VENV_ABSENT="pulumi_command")  # fmt: skip
    assert "no stack kind in this backend; fix: pulumi stack init kind" in "\n".join(lines)
    line = _line(lines, "infra extra")
    assert "pulumi_command not installed; fix: .venv/bin/pip install" in line
    assert "-e '.[infra]'" in line


def test_a_stack_without_a_file_or_with_a_setting_missing_says_the_command(tmp_path, project):
    path = _bin(tmp_path, "pulumi", "docker", "kubectl")
    _, lines = _doctor(tmp_path, path, "--stack", "mine")
    assert "no stacks/Pulumi.mine.yaml; fix: pulumi stack init mine" in _line(lines, "settings")
    _, lines = _doctor(tmp_path, path, "--stack", "gke-gpu-8")
    line = _line(lines, "settings for pulumi up")
    assert "apiAllowedCidrs is empty" in line
    assert "fix: pulumi config set --path 'stackbench:apiAllowedCidrs[0]'" in line
    assert line.endswith("--stack gke-gpu-8")


def test_gke_names_the_apis_to_enable_and_the_gpu_quota_to_request(tmp_path, project):
    with (project / "stacks" / "Pulumi.gke-gpu-8.yaml").open("a") as f:
        f.write(CIDRS + "  stackbench:gcpProject: bench-1\n")
    path = _bin(tmp_path, "pulumi", "docker", "gcloud", "gke-gcloud-auth-plugin", "kubectl")
    enabled = ALL_APIS.replace("container.googleapis.com ", "")
    code, lines = _doctor(tmp_path, path, "--stack", "gke-gpu-8", ENABLED=enabled,
                          T4_LIMIT="4.0", STACKS='{"name": "gke-gpu-8"}')  # fmt: skip
    assert code == 1
    assert _line(lines, "APIs").endswith(
        "container.googleapis.com not enabled; fix: gcloud services enable "
        "container.googleapis.com --project bench-1"
    )
    quota = _line(lines, "GPU quota (NVIDIA_T4_GPUS in us-central1)")
    assert "limit 4, the stack may run 8; fix: request NVIDIA_T4_GPUS >= 8" in quota
    assert _line(lines, "GCP project") == "ok GCP project: bench-1"


def test_gke_without_credentials_or_auth_plugin_says_how_to_get_them(tmp_path, project):
    with (project / "stacks" / "Pulumi.gke-cpu-16.yaml").open("a") as f:
        f.write(CIDRS)
    path = _bin(tmp_path, "pulumi", "docker", "gcloud", "kubectl")
    code, lines = _doctor(tmp_path, path, "--stack", "gke-cpu-16", GCP_PROJECT="bench-2",
                          GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "none.json"))  # fmt: skip
    assert code == 1
    assert "fix: gcloud components install gke-gcloud-auth-plugin" in _line(lines, "auth-plugin")
    assert "fix: gcloud auth application-default login" in _line(lines, "application-default")
    assert not [x for x in lines if "GPU quota" in x]  # a CPU stack asks for none


def test_eks_names_the_vcpu_quota_of_its_gpu_instances(tmp_path, project):
    with (project / "stacks" / "Pulumi.eks-gpu-8.yaml").open("a") as f:
        f.write(CIDRS)
    path = _bin(tmp_path, "pulumi", "docker", "aws", "kubectl")
    code, lines = _doctor(tmp_path, path, "--stack", "eks-gpu-8", G_VCPUS="0.0")
    assert code == 1
    assert _line(lines, "AWS credentials") == "ok AWS credentials: account 123456789012"
    quota = _line(lines, "EC2 vCPU quota for g4dn.xlarge in us-east-1")
    assert "0 vCPUs, the stack may run 32" in quota  # 8 nodes x 4 vCPUs
    assert "--quota-code L-DB2E81BA --desired-value 32 --region us-east-1" in quota


def test_without_a_stack_it_checks_a_local_run(tmp_path, project):
    code, lines = _doctor(tmp_path, _bin(tmp_path))
    assert code == 0 and lines[-1] == "ready"
    assert _line(lines, "workloads extra").startswith("ok ")
    (tmp_path / "a-file").write_text("")
    code, lines = _doctor(tmp_path, _bin(tmp_path), results="a-file/results")
    assert code == 1
    assert "is not a folder; fix: runner --results-dir DIR" in _line(lines, "results directory")
