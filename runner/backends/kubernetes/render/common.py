"""The parts both job renderers share: labels, the pod's security, volumes, scheduling and the
torchrun launch line. Pure functions of (JobSpec, ClusterConnection); no I/O, no client.

Every process runs `workload_argv` under torchrun. torchrun prefixes each worker's lines with
`[rank<N>]:` (--tee and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), which is how the backend splits
one pod's log into logs/rank-N.log.
"""

from __future__ import annotations

import re
from typing import Any

from runner.backends.kubernetes.connection import ClusterConnection
from runner.errors import SpecError
from runner.job.spec import JobSpec, workload_argv

GPU_RESOURCE = "nvidia.com/gpu"
RUN_ID_LABEL = "stackbench/run-id"
BENCHMARK_LABEL = "stackbench/benchmark"
MANAGED_BY = "stackbench-runner"
# The image runs as this unprivileged user (images/ creates it); volumes are group-owned by it.
RUN_AS_UID = 1000
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
            "--nodes",
            f"{conn.source} has {conn.num_nodes} nodes, {placement.num_nodes} asked; "
            f"ask for fewer or grow the stack (pulumi config set --path nodes.count "
            f"{placement.num_nodes} && pulumi up)",
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


def deadline_s(spec: JobSpec) -> int:
    budget = spec.config.run.time_budget_s  # every workload config has run limits
    return DEFAULT_DEADLINE_S if budget is None else int(budget) + DEADLINE_SLACK_S


def output_dir(spec: JobSpec, conn: ClusterConnection) -> str:
    return f"{conn.results_mount_path.rstrip('/')}/{spec.run_id}"


def workload_args(spec: JobSpec, conn: ClusterConnection) -> list[str]:
    return workload_argv(spec, output_dir=output_dir(spec, conn), python="python")


def labels(spec: JobSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "stackbench",
        "app.kubernetes.io/instance": spec.run_id,
        "app.kubernetes.io/component": "benchmark",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        BENCHMARK_LABEL: spec.benchmark,
        RUN_ID_LABEL: spec.run_id,
    }


def pod_annotations(conn: ClusterConnection) -> dict[str, str]:
    # GKE injects its FUSE sidecar only into pods that ask for it.
    return {"gke-gcsfuse/volumes": "true"} if _store_scheme(conn) == "gs" else {}


def resources(spec: JobSpec) -> dict[str, Any]:
    """Per node (pod): one CPU per process requested; one GPU per process on CUDA."""
    placement = spec.placement
    result: dict[str, Any] = {"requests": {"cpu": str(placement.procs_per_node)}}
    if placement.device == "cuda":
        gpus = str(placement.procs_per_node)
        result["limits"] = {GPU_RESOURCE: gpus}
        result["requests"][GPU_RESOURCE] = gpus
    return result


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_UID,
        "runAsGroup": RUN_AS_UID,
        "fsGroup": RUN_AS_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def volumes(spec: JobSpec, conn: ClusterConnection) -> list[dict[str, Any]]:
    shm = {"medium": "Memory", "sizeLimit": SHM_SIZE[spec.placement.device]}
    return [{"name": "dshm", "emptyDir": shm}, {"name": "results", **_results_source(conn)}]


def volume_mounts(conn: ClusterConnection) -> list[dict[str, Any]]:
    return [
        {"name": "dshm", "mountPath": "/dev/shm"},
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


def launcher_env() -> list[dict[str, str]]:
    return [{"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": RANK_PREFIX_TEMPLATE}]


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
        attributes = {"bucketName": bucket, "mountOptions": "implicit-dirs"}
        return {"csi": {"driver": GCSFUSE_DRIVER, "volumeAttributes": attributes}}
    if scheme == "s3":
        return {"persistentVolumeClaim": {"claimName": S3_RESULTS_CLAIM}}
    # No store: results live in the pod for its life; fetch rebuilds them from rank 0's log.
    return {"emptyDir": {}}


def _store_scheme(conn: ClusterConnection) -> str | None:
    return conn.results_store.partition("://")[0] if conn.results_store else None
