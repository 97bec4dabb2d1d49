"""StackConfig: the stack's settings, parsed and validated before any resource exists.

Keys, types, defaults and descriptions are declared once, in Pulumi.yaml; the Pulumi CLI
applies the defaults and hands every value over as a string. This module turns those strings
into one frozen, typed value and checks the combinations (GPU model and count against the
machine type, node counts, CIDRs, versions). Every error names the key and the `pulumi config
set` command that fixes it. It creates no resources and reads nothing but the mapping given.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from contract.stack import JOB_APIS, PROVIDERS, JobApi, Provider
from infra.catalog import (
    EC2_INSTANCE_RE,
    EKS_ADDON_REGISTRY_ACCOUNTS,
    GKE_MACHINE_RE,
    NO_GPUS,
    GpuOffer,
    eks_offer,
    gke_offer,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # where Pulumi.yaml is
NAMESPACE = "stackbench"  # the Pulumi project name, so keys read `stackbench:KEY`
GKE_DRIVER_VERSIONS = ("DEFAULT", "LATEST")
MAX_NODES = 1000  # a guard against typos (80 for 8), not a cloud quota
# An API CIDR this wide (0.0.0.0/0, or 0.0.0.0/1 + 128.0.0.0/1) opens the cluster to the
# internet: accepted only with apiOpenToInternet, and every `pulumi up` then warns.
WIDEST_QUIET_PREFIX = 8
API_CIDR_EXAMPLE = "[0] 203.0.113.7/32"  # the `pulumi config set --path` fix: index, value
# Used when systemMachineType is empty: small general-purpose machines, no GPU.
SYSTEM_MACHINE = {"gke": "e2-standard-4", "eks": "m6i.large", "kind": ""}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what the CLI's `integer` type takes: no 1_000, no "٨"
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
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_K8S_MINOR = re.compile(r"^1\.(\d+)(\.\d+)?$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


class ConfigError(ValueError):
    """A stack setting is invalid; the message names the key and the command that fixes it.

    `example` is the value of the `pulumi config set` fix; a list key's example starts with
    the index (`[0] 203.0.113.7/32`), which makes the fix a `--path` command. `fix` replaces
    that command and `subject` the `stackbench:KEY` the message starts with, for what a
    `pulumi config set` cannot fix (an unknown key, the stack's name)."""

    def __init__(
        self,
        key: str,
        problem: str,
        example: str,
        *,
        fix: str | None = None,
        subject: str | None = None,
    ) -> None:
        self.key = key
        subject = subject or f"{NAMESPACE}:{key}"
        super().__init__(f"{subject} {problem}; fix: {fix or set_command(key, example)}")


def set_command(key: str, example: str) -> str:
    """The `pulumi config set` that gives `key` the value `example`, pasteable into a shell."""
    if example.startswith("["):
        index, _, value = example.partition(" ")
        return f"pulumi config set --path '{NAMESPACE}:{key}{index}' {value}"
    return f"pulumi config set {NAMESPACE}:{key} {example}"


@dataclass(frozen=True)
class StackConfig:
    """One stack's validated settings; see Pulumi.yaml for what each means."""

    stack: str
    provider: Provider
    region: str
    zone: str
    gcp_project: str
    kubernetes_version: str
    system_node_count: int
    system_machine_type: str
    node_machine_type: str
    min_nodes: int
    max_nodes: int
    gpu_type: str
    gpus_per_node: int
    gpu_driver_version: str
    spot: bool
    api_allowed_cidrs: tuple[str, ...]
    api_open_to_internet: bool
    deletion_protection: bool
    job_api: JobApi
    namespace: str
    trainer_version: str
    training_operator_version: str
    device_plugin_version: str
    results_dir: str

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def image_variant(self) -> Literal["cuda", "cpu"]:
        return "cuda" if self.has_gpus else "cpu"


# --- one parser per key: raw CLI string -> typed value, or ConfigError ---------------------


def _text(key: str, raw: str) -> str:
    return raw.strip()


def _integer(lo: int, hi: int, example: int) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        if not _INTEGER.fullmatch(raw.strip()):
            raise ConfigError(key, f"must be an integer, got {raw!r}", str(example))
        value = int(raw.strip())
        if not lo <= value <= hi:
            raise ConfigError(key, f"must be between {lo} and {hi}, got {value}", str(example))
        return value

    return parse


def _boolean(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f"must be true or false, got {raw!r}", "false")
    return value == "true"


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        if raw.strip() not in options:
            raise ConfigError(key, f"must be one of {', '.join(options)}, got {raw!r}", options[0])
        return raw.strip()

    return parse


def _semver(key: str, raw: str) -> str:
    if not _SEMVER.match(raw.strip()):
        raise ConfigError(key, f"must be a pinned version x.y.z, got {raw!r}", "2.3.0")
    return raw.strip()


def _cidrs(key: str, raw: str) -> tuple[str, ...]:
    example = API_CIDR_EXAMPLE
    try:
        items = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(key, f"must be a list of CIDRs, got {raw!r}", example) from None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError(key, f"must be a list of CIDR strings, got {raw!r}", example)
    for item in items:
        try:
            net = ipaddress.ip_network(item, strict=True)
        except ValueError:
            raise ConfigError(key, f"has {item!r}, which is not a CIDR", example) from None
        if net.version != 4:
            raise ConfigError(key, f"has {item!r}; only IPv4 CIDRs are supported", example)
    return tuple(items)


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "provider": _choice(PROVIDERS),
    "region": _text,
    "zone": _text,
    "gcpProject": _text,
    "kubernetesVersion": _text,
    "systemNodeCount": _integer(1, 10, 1),
    "systemMachineType": _text,
    "nodeMachineType": _text,
    "minNodes": _integer(0, MAX_NODES, 0),
    "maxNodes": _integer(1, MAX_NODES, 8),
    "gpuType": _text,
    "gpusPerNode": _integer(0, 16, 1),
    "gpuDriverVersion": _choice(GKE_DRIVER_VERSIONS),
    "spot": _boolean,
    "apiAllowedCidrs": _cidrs,
    "apiOpenToInternet": _boolean,
    "deletionProtection": _boolean,
    "jobApi": _choice(JOB_APIS),
    "namespace": _text,
    "trainerVersion": _semver,
    "trainingOperatorVersion": _semver,
    "devicePluginVersion": _semver,
    "resultsDir": _text,
}
KEYS: tuple[str, ...] = tuple(_PARSERS)
EXAMPLES = {"provider": "gke", "region": "us-central1", "zone": "us-central1-a"}


def parse_stack_config(raw: Mapping[str, str | None], stack: str, project_root: str) -> StackConfig:
    """Parse the CLI's strings (key -> value, None when unset) and check them together.
    A key `raw` has beyond the declared ones is a typo the program would otherwise ignore."""
    _check_known(raw)
    values: dict[str, Any] = {}
    for key, parse in _PARSERS.items():
        text = raw.get(key)
        if text is None:
            example = EXAMPLES.get(key, "VALUE")
            raise ConfigError(key, "is not set (Pulumi.yaml declares every key)", example)
        values[key] = parse(key, text)
    _check_stack_name(stack, values["provider"])
    _check_location(values)
    _check_api_access(values)
    _check_names(values)
    _check_pools(values)
    _check_gpus(values)
    _check_job_api(values)
    cfg = StackConfig(
        stack=stack,
        provider=values["provider"],
        region=values["region"],
        zone=values["zone"],
        gcp_project=values["gcpProject"],
        kubernetes_version=values["kubernetesVersion"],
        system_node_count=values["systemNodeCount"],
        system_machine_type=values["systemMachineType"] or SYSTEM_MACHINE[values["provider"]],
        node_machine_type=values["nodeMachineType"],
        min_nodes=values["minNodes"],
        max_nodes=values["maxNodes"],
        gpu_type=values["gpuType"],
        gpus_per_node=values["gpusPerNode"],
        gpu_driver_version=values["gpuDriverVersion"],
        spot=values["spot"],
        api_allowed_cidrs=values["apiAllowedCidrs"],
        api_open_to_internet=values["apiOpenToInternet"],
        deletion_protection=values["deletionProtection"],
        job_api=values["jobApi"],
        namespace=values["namespace"],
        trainer_version=values["trainerVersion"],
        training_operator_version=values["trainingOperatorVersion"],
        device_plugin_version=values["devicePluginVersion"],
        results_dir=_results_dir(values, stack, project_root),
    )
    return cfg


def _check_known(raw: Mapping[str, str | None]) -> None:
    """Refuse a setting this project does not have: Pulumi passes any key through, and the
    program would build the stack as if it were not there (`maxnodes: 16`, one node)."""
    unknown = sorted(set(raw) - set(_PARSERS))
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(key, KEYS, n=1) or [
        k for k in KEYS if k.lower() == key.lower()
    ]
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(
        key,
        f"is not a setting of this project{hint}; Pulumi.yaml declares every one",
        "",
        fix=f"pulumi config rm {NAMESPACE}:{key}"
        + (f" && pulumi config set {NAMESPACE}:{close[0]} VALUE" if close else ""),
    )


def _check_stack_name(stack: str, provider: str) -> None:
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
    """A GCP service account id of the stack, cut to GCP's length; _check_stack_name keeps
    the ids of one stack valid and apart."""
    assert suffix in GKE_ACCOUNT_SUFFIXES
    return f"{GKE_ACCOUNT_PREFIX}{stack}{suffix}"[:GKE_ACCOUNT_ID_MAX]


def _check_location(v: dict[str, Any]) -> None:
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
            f"is {region!r}, whose EKS add-on image registry infra/catalog.py does not list "
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


def _check_api_access(v: dict[str, Any]) -> None:
    wide = [c for c in v["apiAllowedCidrs"] if _opens_internet(c)]
    if wide and not v["apiOpenToInternet"]:
        raise ConfigError(
            "apiAllowedCidrs",
            f"has {', '.join(wide)}, which opens the Kubernetes API to the internet; list your "
            f"own address, or accept it with `pulumi config set {NAMESPACE}:apiOpenToInternet "
            "true` (every `pulumi up` then warns)",
            API_CIDR_EXAMPLE,
        )


def _opens_internet(cidr: str) -> bool:
    return ipaddress.ip_network(cidr).prefixlen < WIDEST_QUIET_PREFIX


def _check_names(v: dict[str, Any]) -> None:
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


def _check_pools(v: dict[str, Any]) -> None:
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


def _check_gpus(v: dict[str, Any]) -> None:
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


def _check_job_api(v: dict[str, Any]) -> None:
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


def _results_dir(v: dict[str, Any], stack: str, project_root: str) -> str:
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


def check_deployable(cfg: StackConfig) -> None:
    """What `pulumi up` needs on top of valid settings: a cloud stack names who may reach its
    API (the stack files leave that to each operator, and `runner cost` reads them as is)."""
    if cfg.provider != "kind" and not cfg.api_allowed_cidrs:
        raise ConfigError(
            "apiAllowedCidrs",
            "is empty: list who may reach the Kubernetes API (it is never opened to everyone)",
            API_CIDR_EXAMPLE,
        )


def open_api_warning(cfg: StackConfig) -> str | None:
    """The warning every `pulumi up` prints while the API is open to the internet."""
    wide = [c for c in cfg.api_allowed_cidrs if _opens_internet(c)]
    if cfg.provider == "kind" or not wide:
        return None
    return (
        f"the Kubernetes API of stack {cfg.stack} accepts connections from {', '.join(wide)}: "
        "anyone on the internet can try its credentials and probe it for flaws. Narrow "
        f"{NAMESPACE}:apiAllowedCidrs to your own addresses and set {NAMESPACE}:apiOpenToInternet "
        "false."
    )


def _runtime_keys() -> set[str]:
    """Every `stackbench:` key the CLI handed the program, declared or not: the language host
    passes them all in PULUMI_CONFIG (mocks set the runtime's map instead)."""
    from pulumi.runtime import config as runtime_config

    names = set(runtime_config.get_config_env()) | set(runtime_config.CONFIG.get())
    return {name for ns, _, name in (n.partition(":") for n in names) if ns == NAMESPACE}


def load_stack_config() -> StackConfig:
    """Read this stack's settings from the Pulumi runtime, validate them, warn if the API is
    open to the internet."""
    import pulumi  # here, so the parser above stays importable and testable without a runtime

    config = pulumi.Config(NAMESPACE)
    raw = {key: config.get(key) for key in (*KEYS, *_runtime_keys() - set(KEYS))}
    cfg = parse_stack_config(raw, pulumi.get_stack(), str(PROJECT_ROOT))
    check_deployable(cfg)
    if warning := open_api_warning(cfg):
        pulumi.log.warn(warning)
    return cfg
