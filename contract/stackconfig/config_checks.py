"""The stack settings checked together, once each value is parsed (config_values.py).

Location, API access, names, pools, GPUs against the machine type, the job API's versions and
kind's results folder: each check takes the parsed values (key -> typed value) and raises a
ConfigError naming the key and the `pulumi config set` that fixes it. It reads nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath
from typing import Any

from contract.stackconfig.catalog import (
    EC2_INSTANCE_RE,
    EKS_ADDON_REGISTRY_ACCOUNTS,
    GKE_MACHINE_RE,
    NO_GPUS,
    GpuOffer,
    eks_offer,
    gke_offer,
)
from contract.stackconfig.config_values import API_CIDR_EXAMPLE, NAMESPACE, ConfigError

# An API CIDR this wide (0.0.0.0/0, or 0.0.0.0/1 + 128.0.0.0/1) opens the cluster to the
# internet: accepted only with apiOpenToInternet, and every `pulumi up` then warns.
WIDEST_QUIET_PREFIX = 8
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# A stack's name becomes part of cloud and kind names (the registry repository, kind's cluster,
# GCP service accounts), so it is held to what all of them accept: lowercase letters and
# digits in hyphen-separated words (ECR refuses "--", kind and both clouds refuse capitals).
_STACK_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
# GCP service account ids are 6-30 characters ending in a letter or digit; gke.py and
# results.py name theirs sb-<stack>-nodes and sb-<stack>-results cut to 30 (as deployed stacks
# have them). Up to 25 characters of stack name the two stay apart and end in a letter
# (sb-<25>-n, sb-<25>-r); from 26 on both are sb-<stack>- (invalid) or the same id.
GKE_ACCOUNT_PREFIX, GKE_ACCOUNT_SUFFIXES, GKE_ACCOUNT_ID_MAX = "sb-", ("-nodes", "-results"), 30
MAX_GKE_STACK_NAME = GKE_ACCOUNT_ID_MAX - len(GKE_ACCOUNT_PREFIX) - 2
_K8S_MINOR = re.compile(r"^1\.(\d+)(\.\d+)?$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


def check_stack_name(stack: str, provider: str) -> None:
    """The stack's name goes into cloud resource names (see _STACK_NAME): one that a cloud
    would refuse, or cut short into another's, fails here instead of halfway through `up`."""
    problem = ""
    if not _STACK_NAME.fullmatch(stack):
        problem = (
            "must be lowercase letters and digits in words joined by single hyphens (it names "
            "the stack's registry, cluster and accounts)"
        )
    elif provider == "gke" and len(stack) > MAX_GKE_STACK_NAME:
        problem = (
            f"is over {MAX_GKE_STACK_NAME} characters: cut to the {GKE_ACCOUNT_ID_MAX} of a GCP "
            f"service account id, {GKE_ACCOUNT_PREFIX}<stack>{'/'.join(GKE_ACCOUNT_SUFFIXES)} "
            "would become one id, or none GCP takes"
        )
    if problem:
        raise ConfigError(
            "stack",
            problem,
            "",
            subject=f"stack name {stack!r}",
            fix="pulumi stack rename NEW-NAME (or pulumi stack init NEW-NAME), e.g. gke-gpu-8",
        )


def gke_account_id(stack: str, suffix: str) -> str:
    """A GCP service account id of the stack, cut to GCP's length; check_stack_name keeps
    the ids of one stack valid and apart."""
    assert suffix in GKE_ACCOUNT_SUFFIXES
    return f"{GKE_ACCOUNT_PREFIX}{stack}{suffix}"[:GKE_ACCOUNT_ID_MAX]


def check_location(v: dict[str, Any]) -> None:
    provider, region, zone = v["provider"], v["region"], v["zone"]
    if provider == "gke":
        if not _GCP_REGION.match(region):
            raise ConfigError(
                "region", f"must be a GCP region for gke, got {region!r}", "us-central1"
            )
        if not re.fullmatch(rf"{re.escape(region)}-[a-z]", zone):
            raise ConfigError("zone", f"must be a zone of {region}, got {zone!r}", f"{region}-a")
    if provider == "eks" and not _AWS_REGION.match(region):
        raise ConfigError("region", f"must be an AWS region for eks, got {region!r}", "us-east-1")
    if provider == "eks" and region not in EKS_ADDON_REGISTRY_ACCOUNTS:
        # The node role may pull add-on images from this region's EKS registry only (eks.py):
        # without its account the nodes would never get their network plugin.
        raise ConfigError(
            "region",
            f"is {region!r}, whose EKS add-on image registry "
            "contract/stackconfig/catalog.py does not list "
            "(add it from the EKS user guide, or pick a listed region)",
            "us-east-1",
        )
    version = v["kubernetesVersion"]
    match = _K8S_MINOR.match(version)
    if not match or int(match.group(1)) < 29:
        raise ConfigError("kubernetesVersion", f"must be 1.29 or later, got {version!r}", "1.33")
    if provider == "kind" and not match.group(2):
        raise ConfigError(
            "kubernetesVersion", f"needs a patch version on kind, got {version!r}", "1.33.1"
        )


def check_api_access(v: dict[str, Any]) -> None:
    wide = [c for c in v["apiAllowedCidrs"] if opens_internet(c)]
    if wide and not v["apiOpenToInternet"]:
        raise ConfigError(
            "apiAllowedCidrs",
            f"has {', '.join(wide)}, which opens the Kubernetes API to the internet; list your "
            f"own address, or accept it with `pulumi config set {NAMESPACE}:apiOpenToInternet "
            "true` (every `pulumi up` then warns)",
            API_CIDR_EXAMPLE,
        )


def opens_internet(cidr: str) -> bool:
    return ipaddress.ip_network(cidr).prefixlen < WIDEST_QUIET_PREFIX


def check_names(v: dict[str, Any]) -> None:
    if not _DNS_LABEL.match(v["namespace"]) or v["namespace"].startswith("kube-"):
        raise ConfigError("namespace", f"must be a DNS label, got {v['namespace']!r}", "stackbench")
    for key in ("systemMachineType", "nodeMachineType"):
        name = v[key]
        if v["provider"] == "kind" or (key == "systemMachineType" and not name):
            continue
        pattern = GKE_MACHINE_RE if v["provider"] == "gke" else EC2_INSTANCE_RE
        example = "n1-standard-4" if v["provider"] == "gke" else "g5.xlarge"
        if not pattern.match(name):
            raise ConfigError(key, f"must be a {v['provider']} machine type, got {name!r}", example)
    project = v["gcpProject"]
    if project and not re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", project):
        raise ConfigError("gcpProject", f"must be a GCP project id, got {project!r}", "my-project")


def check_pools(v: dict[str, Any]) -> None:
    if v["minNodes"] > v["maxNodes"]:
        raise ConfigError(
            "minNodes", f"({v['minNodes']}) exceeds maxNodes ({v['maxNodes']})", str(v["maxNodes"])
        )
    if v["provider"] == "kind" and v["maxNodes"] > 16:
        raise ConfigError("maxNodes", "is over 16, too many kind nodes for one host", "2")


def _offer(v: dict[str, Any]) -> GpuOffer:
    if v["provider"] == "gke":
        return gke_offer(v["nodeMachineType"])
    if v["provider"] == "eks":
        return eks_offer(v["nodeMachineType"])
    return NO_GPUS


def check_gpus(v: dict[str, Any]) -> None:
    gpu, count, machine, offer = v["gpuType"], v["gpusPerNode"], v["nodeMachineType"], _offer(v)
    if v["provider"] == "kind" and (gpu or count):
        raise ConfigError("gpusPerNode", "must be 0: kind stacks are CPU-only here", "0")
    if bool(gpu) != bool(count):
        key, example = ("gpuType", "nvidia-tesla-t4") if count else ("gpusPerNode", "1")
        raise ConfigError(key, "must be set together with gpuType/gpusPerNode", example)
    if not gpu:
        if offer.built_in:
            raise ConfigError(
                "gpuType",
                f"is empty but {machine} carries GPUs ({offer.describe()})",
                next(iter(offer.counts)),
            )
        return
    if gpu not in offer.counts:
        options = offer.describe() or "none; pick a GPU machine type"
        raise ConfigError(
            "gpuType",
            f"{gpu!r} is not offered on {machine} ({options})",
            next(iter(offer.counts), "''"),
        )
    if count not in offer.counts[gpu]:
        allowed = ", ".join(str(c) for c in sorted(offer.counts[gpu]))
        raise ConfigError(
            "gpusPerNode",
            f"must be {allowed} for {gpu} on {machine}, got {count}",
            str(max(offer.counts[gpu])),
        )


def check_job_api(v: dict[str, Any]) -> None:
    if v["jobApi"] == "trainjob" and not v["trainerVersion"].startswith("2.3."):
        raise ConfigError(
            "trainerVersion",
            f"must be 2.3.x (the TrainJob API the runner renders), got {v['trainerVersion']}",
            "2.3.0",
        )
    if v["jobApi"] == "pytorchjob" and not v["trainingOperatorVersion"].startswith("1.9."):
        raise ConfigError(
            "trainingOperatorVersion",
            f"must be 1.9.x (PyTorchJob kubeflow.org/v1), got {v['trainingOperatorVersion']}",
            "1.9.4",
        )


def results_dir(v: dict[str, Any], stack: str, project_root: str) -> str:
    """kind's host directory for results: absolute, since it becomes a file:// URI."""
    if v["provider"] != "kind":
        return ""
    path = v["resultsDir"] or f"{project_root}/results/.kind-store/{stack}"
    if not PurePosixPath(path).is_absolute() or any(c in path for c in "\n\"':,"):
        raise ConfigError("resultsDir", f"must be an absolute path, got {path!r}", "/srv/results")
    parts = PurePosixPath(path).parts
    # The create hands the folder to the job pods' user: never /, a top-level folder, or a
    # path that climbs out of where it says (infra/kind.py checks what is already there).
    if len(parts) < 3 or ".." in parts:
        raise ConfigError(
            "resultsDir", f"must be a folder of its own below a top-level one, got {path!r}",
            "/srv/results",
        )  # fmt: skip
    # As Docker reports the mount (kind.py tells the stack's own cluster by it): no `//`, no
    # `.`, no trailing `/`; POSIX keeps a leading `//`, PurePosixPath too, so it is rebuilt.
    return "/" + "/".join(parts[1:])
