"""The parts both job renderers share: labels, the pod's security, volumes, scheduling, network
shaping and the torchrun launch line. Pure functions of (JobSpec, ClusterConnection); no I/O,
no client. Resources are resources.py's.

What a job pod may do (docs/security.md): it runs as the image's unprivileged user
(contract/stack.py IMAGE_UID) with no capabilities, no privilege escalation, the runtime's
seccomp profile and a read-only root filesystem; it writes only /tmp and its home (emptyDirs,
for torch, Triton and inductor caches), /dev/shm and the results mount; it gets no API token
(the stack's service account mounts none, and the PyTorchJob pod says so again) and no
service-link environment.

Every process runs `workload_argv` under torchrun. torchrun prefixes each worker's lines with
`[rank<N>]:` (--tee and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), which is how the backend splits
one pod's log into logs/rank-N.log.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from contract.network import ENV as NETWORK_ENV
from contract.network import NetworkRecord
from contract.runsecret import SECRET_ENV, SECRET_KEY, secret_name
from contract.stack import IMAGE_HOME, IMAGE_UID
from runner.backends.kubernetes.render.resources import pod_resources
from runner.errors import SpecError
from runner.job.link import parse_link, refuse_impaired
from runner.job.spec import JobSpec, workload_argv

if TYPE_CHECKING:  # annotations only: the connection imports jobapis, which renders
    from runner.backends.kubernetes.connection import ClusterConnection

RUN_ID_LABEL = "stackbench/run-id"
BENCHMARK_LABEL = "stackbench/benchmark"
MANAGED_BY = "stackbench-runner"
# The only writable places besides /dev/shm and the results mount: the root filesystem is
# read-only. Sizes cap what a runaway process can fill (torch, Triton and inductor caches are
# hundreds of MiB); over the cap the kubelet evicts the pod.
SCRATCH_VOLUMES = {"tmp": ("/tmp", "4Gi"), "home": (IMAGE_HOME, "4Gi")}
# The CNI bandwidth plugin reads these (bits per second, a Kubernetes quantity).
INGRESS_BANDWIDTH = "kubernetes.io/ingress-bandwidth"
EGRESS_BANDWIDTH = "kubernetes.io/egress-bandwidth"
# torchrun tees every worker's output to the pod log with this prefix (`[rank3]:...`).
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
RANK_PREFIX_RE = re.compile(r"^\[rank(\d+)\]:")
# Runaway-cost guard: a run with no time budget is stopped after this long; with a budget,
# after the budget plus slack for pulling the image and starting the processes.
DEFAULT_DEADLINE_S = 6 * 3600
DEADLINE_SLACK_S = 1800
SHM_SIZE = {"cpu": "1Gi", "cuda": "16Gi"}
# Where the kind node mounts the results store's host directory (infra's contract).
KIND_NODE_RESULTS_DIR = "/results"
# Mountpoint for S3 supports only static provisioning: the stack makes this claim in the
# job namespace for s3:// stores.
S3_RESULTS_CLAIM = "stackbench-results"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# Longest name that leaves room for the suffixes the controllers add to pods and services
# (`-worker-12`, `-node-0-12`) within the 63-character limit of a DNS label.
MAX_NAME_LENGTH = 50
DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def check_placement(spec: JobSpec, conn: ClusterConnection) -> None:
    """Refuse, before submit, what the cluster cannot run; each error says what to change."""
    name = spec.run_id
    if len(name) > MAX_NAME_LENGTH or not DNS_LABEL_RE.fullmatch(name):
        raise SpecError(
            "BENCHMARK",
            f"run id {name!r} must be a DNS label (lowercase letters, digits, '-') of at most "
            f"{MAX_NAME_LENGTH} characters to name a Kubernetes job",
        )
    placement = spec.placement
    if conn.num_nodes is not None and placement.num_nodes > conn.num_nodes:
        raise SpecError(
            "--workers",
            f"{conn.source} has {conn.num_nodes} nodes, "
            f"{placement.num_nodes} asked; ask for fewer{_grow_hint(conn, placement.num_nodes)}",
        )
    if placement.device != "cuda" or conn.gpus_per_node is None:
        return
    if conn.gpus_per_node == 0:
        raise SpecError("--device", f"{conn.source} has no GPUs; use --device cpu")
    if placement.procs_per_node > conn.gpus_per_node:
        raise SpecError(
            "--workers",
            f"one process per GPU: {conn.source} has {conn.gpus_per_node} GPUs per node, "
            f"{placement.procs_per_node} processes asked",
        )


def _grow_hint(conn: ClusterConnection, nodes: int) -> str:
    """How to give a stack `nodes` training nodes: its maxNodes setting (Pulumi.yaml)."""
    if not conn.stack:
        return ""
    stack = conn.stack
    return (
        f" or grow the stack (pulumi config set stackbench:maxNodes {nodes} --stack {stack} "
        f"&& pulumi up --stack {stack})"
    )


def deadline_s(spec: JobSpec) -> int:
    budget = spec.config.run.time_budget_s  # every workload config has run limits
    return DEFAULT_DEADLINE_S if budget is None else int(budget) + DEADLINE_SLACK_S


def output_dir(spec: JobSpec, conn: ClusterConnection) -> str:
    return f"{conn.results_mount_path.rstrip('/')}/{spec.run_id}"


def workload_args(spec: JobSpec, conn: ClusterConnection) -> list[str]:
    """The workload's argv as a container's command or args, which Kubernetes rewrites: it
    expands `$(VAR)` from the container's environment (RANK, PET_NODE_RANK ...) and turns `$$`
    into `$`. The argv carries free text (`--set data_dir=...` in --config), which must reach
    the workload as job.json records it, so every `$` is escaped as `$$`."""
    argv = workload_argv(spec, output_dir=output_dir(spec, conn), python="python")
    return [escape_expansion(arg) for arg in argv]


def escape_expansion(text: str) -> str:
    """`text` as Kubernetes' $(VAR) expansion of command and args gives it back unchanged."""
    return text.replace("$", "$$")


def labels(spec: JobSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "stackbench",
        "app.kubernetes.io/instance": spec.run_id,
        "app.kubernetes.io/component": "benchmark",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        BENCHMARK_LABEL: spec.benchmark,
        RUN_ID_LABEL: spec.run_id,
    }


def pod_annotations(spec: JobSpec, conn: ClusterConnection) -> dict[str, str]:
    """GKE injects its FUSE sidecar only into pods that ask for it; the bandwidth plugin
    shapes only pods that carry its annotations (bandwidth_annotations)."""
    annotations = {"gke-gcsfuse/volumes": "true"} if _store_scheme(conn) == "gs" else {}
    return annotations | bandwidth_annotations(conn, link_mbit(spec)) | plugin_annotations(spec)


PLUGINS_ANNOTATION = "stackbench.io/plugins"


def plugin_annotations(spec: JobSpec) -> dict[str, str]:
    """Which plugins the pods load and the source hash each must have (the workers check it,
    --expect-plugin): `name=sha256,...`, for whoever reads the job in the cluster."""
    if not spec.plugins:
        return {}
    return {PLUGINS_ANNOTATION: ",".join(f"{p.name}={p.source_sha256}" for p in spec.plugins)}


def link_mbit(spec: JobSpec) -> float | None:
    """The pods' rate; a delay, jitter or loss is refused (issue 32, docs/security.md)."""
    if spec.placement.link is None:
        return None
    link = parse_link(spec.placement.link)
    # netem in a pod needs NET_ADMIN in a privileged init container on every node's pods: a
    # security cost no stack here takes; a link recorded as delayed that was not would lie.
    refuse_impaired(link, "a cluster", "pods get a rate from the CNI bandwidth plugin, and "
                    "nothing here adds a delay or loss to a pod's network")  # fmt: skip
    return link.rate_mbit_s


def bandwidth_annotations(conn: ClusterConnection, link_mbit: float | None) -> dict[str, str]:
    """Each pod's ingress and egress capped at `link_mbit` megabits per second, on a cluster
    whose pod network enforces the annotations; refused elsewhere, since a run recorded at a
    link rate the network ignored would lie."""
    if link_mbit is None:
        return {}
    if not link_mbit > 0:
        raise SpecError("--link", f"must be a positive rate in Mbit/s, got {link_mbit}")
    if not conn.bandwidth_shaping:
        why = "does not" if conn.bandwidth_shaping is False else "may not (it cannot tell)"
        raise SpecError(
            "--link",
            f"the pod network of {conn.source} {why} enforce pod bandwidth annotations; use a "
            "stack that does (kind, eks) or drop --link",
        )
    rate = f"{link_mbit:g}M" if link_mbit == int(link_mbit) else f"{round(link_mbit * 1000)}k"
    return {INGRESS_BANDWIDTH: rate, EGRESS_BANDWIDTH: rate}


def resources(spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
    """The node container's requests and limits (resources.py has the formula)."""
    return pod_resources(spec.placement, conn.node_job_resources, conn.gpus_per_node)


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "fsGroup": IMAGE_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }


def pod_isolation() -> dict[str, Any]:
    """Pod-spec fields that keep cluster facts out of the pod (PyTorchJob only: a TrainJob
    patch cannot set them, so the stack's runtime and service account do; infra/)."""
    return {"automountServiceAccountToken": False, "enableServiceLinks": False}


def volumes(spec: JobSpec, conn: ClusterConnection) -> list[dict[str, Any]]:
    shm = {"medium": "Memory", "sizeLimit": SHM_SIZE[spec.placement.device]}
    scratch = [
        {"name": name, "emptyDir": {"sizeLimit": size}}
        for name, (_, size) in SCRATCH_VOLUMES.items()
    ]
    return [
        {"name": "dshm", "emptyDir": shm},
        *scratch,
        {"name": "results", **_results_source(conn)},
    ]


def volume_mounts(conn: ClusterConnection) -> list[dict[str, Any]]:
    scratch = [{"name": name, "mountPath": path} for name, (path, _) in SCRATCH_VOLUMES.items()]
    return [
        {"name": "dshm", "mountPath": "/dev/shm"},
        *scratch,
        {"name": "results", "mountPath": conn.results_mount_path},
    ]


def scheduling(conn: ClusterConnection) -> dict[str, Any]:
    """Every run goes to the stack's training pool, so that a result always means the same
    hardware (never the system pool); on a GPU stack that pool is tainted, hence tolerations
    for CPU runs too. Only GPU runs request GPUs (resources, elsewhere)."""
    result: dict[str, Any] = {}
    if conn.node_selector:
        result["nodeSelector"] = dict(conn.node_selector)
    if conn.gpu_tolerations:
        result["tolerations"] = [dict(t) for t in conn.gpu_tolerations]
    return result


def launcher_env(spec: JobSpec) -> list[dict[str, Any]]:
    """torchrun's rank prefix, the network record rank 0 copies into manifest.json
    (contract/network.py): the pods' bandwidth as asked for, not measured; and the run's
    secret (run_secret_env)."""
    rate = link_mbit(spec)
    if rate is None:
        network = NetworkRecord(description="the cluster's pod network, unshaped, not measured")
    else:
        network = NetworkRecord(
            description=f"{spec.placement.link} per pod, each direction (the CNI bandwidth "
            "plugin's pod annotations)",
            link=spec.placement.link,
            asked_mbit_s=rate,
            method="pod annotations; not measured",
        )
    return [
        {"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": RANK_PREFIX_TEMPLATE},
        {"name": NETWORK_ENV, "value": network.to_env()},
        run_secret_env(spec),
    ]


def run_secret_env(spec: JobSpec) -> dict[str, Any]:
    """SECRET_ENV from the run's own Secret, which submit creates with a random secret
    (runner/backends/kubernetes/runsecret.py): the key that signs an elastic group's records,
    so that no other client of its store changes who is a member. The manifest (job.json, the
    dry run) names the Secret, never holds the secret; a container does not start until the
    Secret exists (not optional), so no pod of the run runs unsigned."""
    ref = {"name": secret_name(spec.run_id), "key": SECRET_KEY}
    return {"name": SECRET_ENV, "valueFrom": {"secretKeyRef": ref}}


def torchrun_flags() -> list[str]:
    # --tee 3: workers' stdout and stderr go to the console (the pod log) with the rank prefix.
    # --no-python: the argv that follows starts with its own interpreter (workload_argv).
    return ["--tee", "3", "--no-python"]


def _results_source(conn: ClusterConnection) -> dict[str, Any]:
    scheme = _store_scheme(conn)
    if scheme == "file":
        # kind: the node mounts the store's host directory here (infra's contract).
        return {"hostPath": {"path": KIND_NODE_RESULTS_DIR, "type": "DirectoryOrCreate"}}
    if scheme == "gs":
        bucket = conn.results_store.partition("://")[2].strip("/")  # type: ignore[union-attr]
        # FUSE files belong to the mounting user: make them the pod's, or it cannot write.
        options = f"implicit-dirs,uid={IMAGE_UID},gid={IMAGE_UID}"
        attributes = {"bucketName": bucket, "mountOptions": options}
        return {"csi": {"driver": GCSFUSE_DRIVER, "volumeAttributes": attributes}}
    if scheme == "s3":
        return {"persistentVolumeClaim": {"claimName": S3_RESULTS_CLAIM}}
    # No store: results live in the pod for its life; fetch rebuilds them from rank 0's log.
    return {"emptyDir": {}}


def _store_scheme(conn: ClusterConnection) -> str | None:
    return conn.results_store.partition("://")[0] if conn.results_store else None
