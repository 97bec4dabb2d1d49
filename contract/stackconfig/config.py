"""StackConfig: the stack's settings, parsed and validated before any resource exists.

Keys, types, defaults and descriptions are declared once, in Pulumi.yaml; the Pulumi CLI
applies the defaults and hands every value over as a string. This module turns those strings
into one frozen, typed value: each key's parser (config_values.py) reads its string, then
config_checks.py checks the combinations (GPU model and count against the machine type,
node counts, CIDRs, versions). Every error names the key and the `pulumi config set` command
that fixes it. It creates no resources and reads nothing but the mapping given: the Pulumi
program reads it from its runtime (infra/settings.py), the runner from the files
(stackfiles.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from contract.stack import JOB_APIS, PROVIDERS, JobApi, Provider
from contract.stackconfig import config_checks as checks
from contract.stackconfig.config_checks import gke_account_id
from contract.stackconfig.config_values import (
    API_CIDR_EXAMPLE,
    NAMESPACE,
    ConfigError,
    boolean,
    choice,
    cidrs,
    folders,
    integer,
    semver,
    set_command,
    text,
)

# Other modules and the tests import these from here: the settings' one front door.
__all__ = [
    "API_CIDR_EXAMPLE",
    "EXAMPLES",
    "KEYS",
    "NAMESPACE",
    "ConfigError",
    "StackConfig",
    "check_deployable",
    "gke_account_id",
    "open_api_warning",
    "parse_stack_config",
    "set_command",
]

GKE_DRIVER_VERSIONS = ("DEFAULT", "LATEST")
MAX_NODES = 1000  # a guard against typos (80 for 8), not a cloud quota
# Used when systemMachineType is empty: small general-purpose machines, no GPU.
SYSTEM_MACHINE = {"gke": "e2-standard-4", "eks": "m6i.large", "kind": ""}


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
    # Plugin package folders the training image carries (contract/imageplugins.py); relative
    # ones from the project root.
    plugins: tuple[str, ...] = ()

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def image_variant(self) -> Literal["cuda", "cpu"]:
        return "cuda" if self.has_gpus else "cpu"


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "provider": choice(PROVIDERS),
    "region": text,
    "zone": text,
    "gcpProject": text,
    "kubernetesVersion": text,
    "systemNodeCount": integer(1, 10, 1),
    "systemMachineType": text,
    "nodeMachineType": text,
    "minNodes": integer(0, MAX_NODES, 0),
    "maxNodes": integer(1, MAX_NODES, 8),
    "gpuType": text,
    "gpusPerNode": integer(0, 16, 1),
    "gpuDriverVersion": choice(GKE_DRIVER_VERSIONS),
    "spot": boolean,
    "apiAllowedCidrs": cidrs,
    "apiOpenToInternet": boolean,
    "deletionProtection": boolean,
    "jobApi": choice(JOB_APIS),
    "namespace": text,
    "trainerVersion": semver,
    "trainingOperatorVersion": semver,
    "devicePluginVersion": semver,
    "resultsDir": text,
    "plugins": folders,
}
KEYS: tuple[str, ...] = tuple(_PARSERS)
EXAMPLES = {"provider": "gke", "region": "us-central1", "zone": "us-central1-a"}


def parse_stack_config(raw: Mapping[str, str | None], stack: str, project_root: str) -> StackConfig:
    """Parse the CLI's strings (key -> value, None when unset) and check them together.
    A key `raw` has beyond the declared ones is a typo the program would otherwise ignore."""
    _check_known(raw)
    values: dict[str, Any] = {}
    for key, parse in _PARSERS.items():
        given = raw.get(key)
        if given is None:
            example = EXAMPLES.get(key, "VALUE")
            raise ConfigError(key, "is not set (Pulumi.yaml declares every key)", example)
        values[key] = parse(key, given)
    checks.check_stack_name(stack, values["provider"])
    checks.check_location(values)
    checks.check_api_access(values)
    checks.check_names(values)
    checks.check_pools(values)
    checks.check_gpus(values)
    checks.check_job_api(values)
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
        results_dir=checks.results_dir(values, stack, project_root),
        plugins=values["plugins"],
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
    wide = [c for c in cfg.api_allowed_cidrs if checks.opens_internet(c)]
    if cfg.provider == "kind" or not wide:
        return None
    return (
        f"the Kubernetes API of stack {cfg.stack} accepts connections from {', '.join(wide)}: "
        "anyone on the internet can try its credentials and probe it for flaws. Narrow "
        f"{NAMESPACE}:apiAllowedCidrs to your own addresses and set {NAMESPACE}:apiOpenToInternet "
        "false."
    )
