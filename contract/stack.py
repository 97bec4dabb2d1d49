"""The stack outputs: what a stack tells the runner, named, typed and checked in one place.

infra/outputs.py exports exactly `OUTPUT_NAMES` (marking `SECRET_OUTPUTS` secret), and its
tests run the Pulumi program under mocks and read what it exported through `parse_outputs`;
the runner reads `pulumi stack output --json --show-secrets` through the same `parse_outputs`
(runner/backends/kubernetes/connection.py). One check, so a stack that passes its tests is a
stack the runner accepts. Also here: the few facts both sides build on (the job APIs and where
their controllers run, where results are mounted, the user the training image runs as, how
long a finished job is kept).

Not here: how infra computes an output (infra/), what the runner does with it (runner/). The
stack's *settings* are contract/stackconfig/config.py's. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from contract.imageplugins import ImagePlugin, parse_plugins, plugins_problem

Provider = Literal["kind", "gke", "eks"]
JobApi = Literal["trainjob", "pytorchjob"]
PROVIDERS: tuple[Provider, ...] = ("kind", "gke", "eks")
JOB_APIS: tuple[JobApi, ...] = ("trainjob", "pytorchjob")
STORE_SCHEMES = ("gs", "s3", "file")

# Where every job pod mounts the results store (kind: where the node mounts the host folder).
RESULTS_MOUNT_PATH = "/results"
# The ClusterTrainingRuntime a trainjob stack installs (infra/runtime.py): the Trainer chart's
# torch runtime plus a TTL for finished jobs. Clusters made elsewhere get the chart's own.
STACK_TRAINING_RUNTIME = "stackbench-torch-distributed"
UPSTREAM_TRAINING_RUNTIME = "torch-distributed"
# The Kubernetes service account jobs run as: an identity for the results store, nothing more.
JOB_SERVICE_ACCOUNT = "stackbench-runner"
# The Kubernetes identity the runner uses (the stack's `runner_kubeconfig` output): allowed
# exactly what the runner calls in the jobs' namespace (runner_role_rules), nothing else; the
# admin kubeconfig stays with `pulumi`.
RUNNER_IDENTITY = "stackbench-cli"
# The unprivileged user of the training image (images/Dockerfile's UID build argument, which
# infra/image.py sets from here) and its home; pods run as that user, with an emptyDir home.
IMAGE_UID = 10001
IMAGE_HOME = "/home/stackbench"
# A finished job and its pods are kept this long for `runner fetch`, then deleted by the
# operator (PyTorchJob's ttlSecondsAfterFinished; the stack runtime's JobSet TTL for TrainJob).
FINISHED_JOB_TTL_S = 7 * 24 * 3600


def runner_role_rules(job_api: JobApi) -> tuple[dict[str, tuple[str, ...]], ...]:
    """The RBAC rules of the runner's Role in the jobs' namespace, for a stack of `job_api`:
    every verb the runner's commands use (submit, status, logs, fetch, cancel, the pending
    timeout) and no other; it may create and delete Secrets (a run's own), never read one.
    tests/runner/test_runner_role.py records the requests of every command against a fake API
    server and holds the two to each other; API discovery (which a 404 asks, to tell a missing
    CRD from a missing namespace) is granted to every authenticated user by Kubernetes' own
    system:discovery role."""
    if job_api == "trainjob":
        jobs = [
            _rule("trainer.kubeflow.org", "trainjobs", "create", "get", "list", "watch", "delete"),
            # A TrainJob's JobSet, read to tell its pods from an earlier job's of the same name.
            _rule("jobset.x-k8s.io", "jobsets", "get"),
        ]
    else:
        jobs = [_rule("kubeflow.org", "pytorchjobs", "create", "get", "list", "watch", "delete")]
    return (
        *jobs,
        _rule("", "pods", "list", "watch"),
        _rule("", "events", "list", "watch"),  # why a pod is pending
        _rule("", "pods/log", "get"),
        # Each run's own Secret, which signs its elastic records (runner/backends/kubernetes/
        # runsecret.py): made at submit, deleted with the job. Never get, list or watch.
        _rule("", "secrets", "create", "delete"),
    )


def _rule(group: str, resource: str, *verbs: str) -> dict[str, tuple[str, ...]]:
    return {"apiGroups": (group,), "resources": (resource,), "verbs": verbs}


@dataclass(frozen=True)
class JobController:
    """The Deployment that runs a job API's controller, as the stack's add-on installs it:
    where it is, and the container whose image says which version runs."""

    namespace: str
    deployment: str
    container: str


# Read from the upstream manifests at the versions infra/sources.py pins:
# - Trainer 2.3.0's chart (charts/kubeflow-trainer/templates/manager/deployment.yaml): the
#   Deployment `<fullname>-controller-manager` in the release's namespace, container `manager`;
#   the stack's release is `kubeflow-trainer` in `kubeflow-system` (infra/addons.py), and a
#   release named like its chart has that name as its fullname.
# - training-operator v1.9.4 (manifests/base/deployment.yaml, overlays/standalone): the
#   Deployment `training-operator` in `kubeflow`, container `training-operator`.
# A cluster made elsewhere may have them elsewhere: the runner then records them as unknown.
JOB_CONTROLLERS: Mapping[JobApi, JobController] = MappingProxyType({
    "trainjob": JobController("kubeflow-system", "kubeflow-trainer-controller-manager", "manager"),
    "pytorchjob": JobController("kubeflow", "training-operator", "training-operator"),
})  # fmt: skip
# The name of the runner's second Role (and its RoleBinding), in the controller's namespace:
# distinct from RUNNER_IDENTITY's, since a stack may put its jobs in that namespace too.
CONTROLLER_READER = f"{RUNNER_IDENTITY}-controller"


def controller_role_rules(job_api: JobApi) -> tuple[dict[str, tuple[str, ...]], ...]:
    """The rules of the runner's Role in the controller's namespace: `get` of the controller's
    one Deployment (resourceNames), which submit reads to record the controller's version
    (runner/backends/kubernetes/controller.py); nothing else there, not even list."""
    controller = JOB_CONTROLLERS[job_api]
    return ({**_rule("apps", "deployments", "get"), "resourceNames": (controller.deployment,)},)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class OutputError(ValueError):
    """One stack output is missing or malformed; `name` says which."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"output {name!r} {problem}")
        self.name = name
        self.problem = problem


@dataclass(frozen=True)
class NodeResources:
    """What one job pod may use of a training node: CPU in millicores, memory in MiB."""

    cpu_m: int
    memory_mib: int


@dataclass(frozen=True)
class StackOutputs:
    """A stack's outputs, checked. See `OUTPUTS` for what each one means."""

    kubeconfig: str = field(repr=False)
    runner_kubeconfig: str = field(repr=False)
    provider: Provider
    namespace: str
    job_api: JobApi
    image: str
    node_selector: Mapping[str, str]
    gpu_tolerations: tuple[Mapping[str, Any], ...]
    gpus_per_node: int
    num_nodes: int
    node_job_resources: NodeResources | None  # None: the stack cannot tell (kind)
    results_store: str
    results_mount_path: str
    service_account: str
    training_runtime: str  # "" on pytorchjob stacks
    bandwidth_shaping: bool
    # The plugins the image carries (contract/imageplugins.py); () from a stack older than
    # the output: its image was built with none.
    image_plugins: tuple[ImagePlugin, ...] = ()


# ---- the check of each output: value -> problem, or None --------------------------------


def image_problem(image: Any) -> str | None:
    """Why `image` is not a pinned image reference, or None. A digest or a version tag is
    pinned; `:latest` and no tag at all are not."""
    if not isinstance(image, str) or not image:
        return "must be an image reference"
    name, _, digest = image.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        return "has a malformed digest (want @sha256:<64 hex>)"
    if digest:
        return None
    tag = name.rsplit("/", 1)[-1].partition(":")[2]
    if not tag or tag == "latest":
        return "is not pinned; give a version tag or an @sha256 digest, not :latest"
    return None


def _choice(options: tuple[str, ...]) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in options else f"must be one of {', '.join(options)}, got {value!r}"

    return check


def _text(pattern: re.Pattern[str] | None = None, what: str = "") -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return f"must be a string, got {type(value).__name__}"
        if not value:
            return "is empty"
        if pattern is not None and not pattern.fullmatch(value):
            return f"must be {what}, got {value!r}"
        return None

    return check


def _count(minimum: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be int, got {type(value).__name__}"
        return None if value >= minimum else f"must be at least {minimum}, got {value}"

    return check


def _selector(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be dict, got {type(value).__name__}"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return "must map label names to string values"
    return None


def _tolerations(value: Any) -> str | None:
    if not isinstance(value, list):
        return f"must be list, got {type(value).__name__}"
    if not all(isinstance(t, dict) and all(isinstance(k, str) for k in t) for t in value):
        return "must be a list of toleration objects"
    return None


def _node_resources(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be dict, got {type(value).__name__}"
    if not value:
        return None  # the stack cannot tell
    if set(value) != {"cpu_m", "memory_mib"}:
        return f"must be {{}} or have exactly cpu_m and memory_mib, got {sorted(value)}"
    for key in ("cpu_m", "memory_mib"):
        problem = _count(1)(value[key])
        if problem:
            return f"{key} {problem}"
    return None


def _store(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    scheme, _, rest = value.partition("://")
    if scheme not in STORE_SCHEMES or not rest or (scheme == "file" and not rest.startswith("/")):
        return f"must be a gs://, s3:// or file:/// URI, got {value!r}"
    return None


def _absolute_path(value: Any) -> str | None:
    if not isinstance(value, str) or not value.startswith("/"):
        return f"must be an absolute path, got {value!r}"
    return None


def _runtime(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    return None if not value or _DNS_SUBDOMAIN.fullmatch(value) else f"is not a name: {value!r}"


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be bool, got {type(value).__name__}"


@dataclass(frozen=True)
class Output:
    name: str
    check: Callable[[Any], str | None] = field(repr=False)
    doc: str
    secret: bool = False
    optional: bool = False  # absent from stacks made before it: parse_outputs' default


OUTPUTS: tuple[Output, ...] = (
    Output("kubeconfig", _text(), "admin kubeconfig of the cluster (YAML or JSON)", secret=True),
    Output(
        "runner_kubeconfig",
        _text(),
        f"kubeconfig of {RUNNER_IDENTITY}, the runner's identity (runner_role_rules)",
        secret=True,
    ),
    Output("provider", _choice(PROVIDERS), "kind, gke or eks"),
    Output("namespace", _text(_DNS_LABEL, "a DNS label"), "where jobs run"),
    Output("job_api", _choice(JOB_APIS), "trainjob (Kubeflow Trainer v2) or pytorchjob (v1)"),
    Output("image", image_problem, "the training image, repo@sha256:..."),
    Output("node_selector", _selector, "labels of the training pool's nodes"),
    Output("gpu_tolerations", _tolerations, "tolerations of the training pool's taints"),
    Output("gpus_per_node", _count(0), "GPUs on each training node (0: CPU only)"),
    Output("num_nodes", _count(1), "training nodes at most: the largest job the stack runs"),
    Output(
        "node_job_resources",
        _node_resources,
        "what one job pod may use of a training node ({} where the stack cannot tell)",
    ),
    Output("results_store", _store, "gs://bucket, s3://bucket or file:///host/dir"),
    Output("results_mount_path", _absolute_path, "where job pods mount the results store"),
    Output("service_account", _text(_DNS_SUBDOMAIN, "a name"), "the jobs' service account"),
    Output("training_runtime", _runtime, "ClusterTrainingRuntime of TrainJobs ('' otherwise)"),
    Output(
        "bandwidth_shaping",
        _flag,
        "whether the pod network enforces kubernetes.io/{ingress,egress}-bandwidth",
    ),
    Output(
        "image_plugins",
        plugins_problem,
        "the plugins the image carries: [{name, version, source_sha256, module}]",
        optional=True,
    ),
)
OUTPUT_NAMES: tuple[str, ...] = tuple(o.name for o in OUTPUTS)
SECRET_OUTPUTS = frozenset(o.name for o in OUTPUTS if o.secret)


def parse_outputs(raw: Mapping[str, Any]) -> StackOutputs:
    """Check every output (names, types, values, and that they agree); OutputError if not.

    Outputs beyond the contract are ignored, so an older runner reads a newer stack."""
    for output in OUTPUTS:
        if output.name not in raw and output.optional:
            continue
        if output.name not in raw:
            raise OutputError(output.name, "is missing")
        problem = output.check(raw[output.name])
        if problem:
            raise OutputError(output.name, problem)
    if raw["job_api"] == "trainjob" and not raw["training_runtime"]:
        raise OutputError("training_runtime", "is empty but job_api is trainjob")
    resources = raw["node_job_resources"]
    return StackOutputs(
        kubeconfig=raw["kubeconfig"],
        runner_kubeconfig=raw["runner_kubeconfig"],
        provider=raw["provider"],
        namespace=raw["namespace"],
        job_api=raw["job_api"],
        image=raw["image"],
        node_selector=MappingProxyType(dict(raw["node_selector"])),
        gpu_tolerations=tuple(MappingProxyType(dict(t)) for t in raw["gpu_tolerations"]),
        gpus_per_node=raw["gpus_per_node"],
        num_nodes=raw["num_nodes"],
        node_job_resources=NodeResources(**resources) if resources else None,
        results_store=raw["results_store"],
        results_mount_path=raw["results_mount_path"],
        service_account=raw["service_account"],
        training_runtime=raw["training_runtime"],
        bandwidth_shaping=raw["bandwidth_shaping"],
        image_plugins=parse_plugins(raw.get("image_plugins", [])),
    )
