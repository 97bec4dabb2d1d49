"""The provider's part of `runner doctor --stack S`: its tools, credentials, APIs and quota.

kind needs kind (and Docker, which every stack needs to build the training image). GKE needs
gcloud and gke-gcloud-auth-plugin (the stack's kubeconfig runs it), application-default
credentials (what Pulumi's Google provider uses), a project, the APIs the stack's resources
live in, and for a GPU stack the region's GPU quota for the GPUs it may run at once. EKS
needs the AWS CLI (the kubeconfig runs `aws eks get-token`), credentials, and for a GPU stack
the region's vCPU quota of the instance family. The quota is read, never requested: asking
for more is a form in the cloud's console, whose address the fix names.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from contract.stackconfig.config import StackConfig
from runner.doctor.checks import Check, ask, missing, passed, tool

DOCKER_FIX = "install Docker (https://docs.docker.com/engine/install/) and start it"
DOCKER_DOWN = "start Docker (sudo systemctl start docker) and let your user reach it"
KUBECTL_FIX = "install kubectl (https://kubernetes.io/docs/tasks/tools/)"
KIND_FIX = "install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
GCLOUD_FIX = "install the gcloud CLI (https://cloud.google.com/sdk/docs/install)"
AUTH_PLUGIN_FIX = "gcloud components install gke-gcloud-auth-plugin"
AWS_FIX = "install the AWS CLI v2 (https://aws.amazon.com/cli/)"
# The services the GKE stack's resources live in (infra/gke.py, image.py, results.py).
GKE_APIS = (
    "compute.googleapis.com",
    "container.googleapis.com",
    "artifactregistry.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)
# EC2's vCPU quotas of GPU instances: "Running On-Demand G and VT instances" and "... P
# instances" (Service Quotas codes); spot capacity has its own.
EC2_GPU_QUOTAS = {"g": "L-DB2E81BA", "p": "L-417A185B"}
EC2_SPOT_GPU_QUOTAS = {"g": "L-3819A6DF", "p": "L-7212CCBC"}
_EC2_SIZE = re.compile(r"(\d*)xlarge")


def checks(cfg: StackConfig, stack: str) -> list[Check]:
    if cfg.provider == "kind":
        return [tool("kind", ["version"], KIND_FIX)]
    if cfg.provider == "gke":
        return _gke(cfg, stack)
    return _eks(cfg)


def _gke(cfg: StackConfig, stack: str) -> list[Check]:
    out = [tool("gcloud", ["version"], GCLOUD_FIX),
           tool("gke-gcloud-auth-plugin", ["--version"], AUTH_PLUGIN_FIX)]  # fmt: skip
    out.append(_adc())
    if not out[0].ok:
        return out
    project = cfg.gcp_project or ask(["gcloud", "config", "get-value", "project"]).out.strip()
    if not project or project == "(unset)":
        fix = f"pulumi config set stackbench:gcpProject PROJECT --stack {stack}"
        return [*out, missing("GCP project", "none set for the stack or gcloud", fix)]
    out.append(passed("GCP project", project))
    out.append(_gke_apis(project))
    if cfg.has_gpus:
        out.append(_gke_gpu_quota(cfg, project))
    return out


def _adc() -> Check:
    step = "Google application-default credentials"
    env = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    config = Path(os.environ.get("CLOUDSDK_CONFIG", Path.home() / ".config" / "gcloud"))
    path = Path(env) if env else config / "application_default_credentials.json"
    if path.is_file():
        return passed(step, str(path))
    return missing(step, f"no {path}", "gcloud auth application-default login")


def _gke_apis(project: str) -> Check:
    step = "GCP APIs enabled"
    answer = ask(["gcloud", "services", "list", "--enabled", "--project", project,
                  "--format=value(config.name)"])  # fmt: skip
    if not answer.ok:
        return missing(step, f"gcloud services list: {answer.last_error()}",
                       "gcloud auth login, then rerun runner doctor")  # fmt: skip
    absent = [api for api in GKE_APIS if api not in answer.out.split()]
    if not absent:
        return passed(step, ", ".join(a.split(".")[0] for a in GKE_APIS))
    return missing(step, f"{', '.join(absent)} not enabled",
                   f"gcloud services enable {' '.join(absent)} --project {project}")  # fmt: skip


def gpu_quota_metric(gpu_type: str, spot: bool) -> str:
    """The Compute Engine quota metric of a GKE accelerator type (nvidia-tesla-t4 ->
    NVIDIA_T4_GPUS; spot and preemptible capacity: PREEMPTIBLE_NVIDIA_T4_GPUS)."""
    name = gpu_type.removeprefix("nvidia-").removeprefix("tesla-").removesuffix("-80gb")
    if gpu_type == "nvidia-a100-80gb":
        name = "a100-80gb"
    metric = f"NVIDIA_{name.upper().replace('-', '_')}_GPUS"
    return f"PREEMPTIBLE_{metric}" if spot else metric


def _gke_gpu_quota(cfg: StackConfig, project: str) -> Check:
    metric = gpu_quota_metric(cfg.gpu_type, cfg.spot)
    need = cfg.gpus_per_node * cfg.max_nodes
    step = f"GPU quota ({metric} in {cfg.region})"
    fix = (f"request {metric} >= {need} in {cfg.region}: "
           f"https://console.cloud.google.com/iam-admin/quotas?project={project}")  # fmt: skip
    answer = ask(["gcloud", "compute", "regions", "describe", cfg.region, "--project", project,
                  "--format=json"])  # fmt: skip
    quotas = answer.json() if answer.ok else None
    limit = _quota_limit(quotas, metric)
    if limit is None:
        why = answer.last_error() if not answer.ok else f"the region lists no {metric}"
        return missing(step, why, fix)
    if limit < need:
        return missing(step, f"limit {limit:g}, the stack may run {need}", fix)
    return passed(step, f"limit {limit:g} >= {need}")


def _quota_limit(region: Any, metric: str) -> float | None:
    if not isinstance(region, dict) or not isinstance(region.get("quotas"), list):
        return None
    for quota in region["quotas"]:
        if isinstance(quota, dict) and quota.get("metric") == metric:
            limit = quota.get("limit")
            return float(limit) if isinstance(limit, int | float) else None
    return None


def _eks(cfg: StackConfig) -> list[Check]:
    out = [tool("aws", ["--version"], AWS_FIX)]
    if not out[0].ok:
        return out
    who = ask(["aws", "sts", "get-caller-identity", "--output", "json"])
    identity = who.json() if who.ok else None
    if not isinstance(identity, dict):
        why = who.last_error() if not who.ok else "no identity in the answer"
        return [*out, missing("AWS credentials", why, "aws configure (or aws sso login)")]
    out.append(passed("AWS credentials", f"account {identity.get('Account', '?')}"))
    if cfg.has_gpus:
        out.append(_ec2_gpu_quota(cfg))
    return out


def instance_vcpus(instance_type: str) -> int | None:
    """vCPUs of an EC2 size by EC2's naming (large 2, xlarge 4, Nxlarge 4N); None: metal."""
    size = instance_type.partition(".")[2]
    if size == "large":
        return 2
    match = _EC2_SIZE.fullmatch(size)
    return 4 * int(match.group(1) or 1) if match else None


def _ec2_gpu_quota(cfg: StackConfig) -> Check:
    family = cfg.node_machine_type[:1]
    codes = EC2_SPOT_GPU_QUOTAS if cfg.spot else EC2_GPU_QUOTAS
    code = codes.get(family)
    step = f"EC2 vCPU quota for {cfg.node_machine_type} in {cfg.region}"
    if code is None:
        return passed(step, "not a G or P instance: the standard quota applies")
    vcpus = instance_vcpus(cfg.node_machine_type)
    need = vcpus * cfg.max_nodes if vcpus else 1
    fix = (f"aws service-quotas request-service-quota-increase --service-code ec2 "
           f"--quota-code {code} --desired-value {need} --region {cfg.region}")  # fmt: skip
    answer = ask(["aws", "service-quotas", "get-service-quota", "--service-code", "ec2",
                  "--quota-code", code, "--region", cfg.region, "--output", "json"])  # fmt: skip
    body = answer.json() if answer.ok else None
    quota = body.get("Quota") if isinstance(body, dict) else None
    value = quota.get("Value") if isinstance(quota, dict) else None
    if not isinstance(value, int | float):
        return missing(step, answer.last_error() if not answer.ok else "no quota value", fix)
    if value < need:
        return missing(step, f"{value:g} vCPUs, the stack may run {need}", fix)
    return passed(step, f"{value:g} vCPUs >= {need}")
