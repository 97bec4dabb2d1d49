"""PyTorchJob (kubeflow.org/v1, training-operator 1.9): Master 1 + Worker n-1. A pure function.

training-operator 1.9 puts MASTER_ADDR, MASTER_PORT, RANK (the node's rank: master 0, worker i
is i+1), WORLD_SIZE (replicas x nprocPerNode), PET_NNODES, PET_NODE_RANK and PET_NPROC_PER_NODE
(nprocPerNode) in every `pytorch` container. It does not set PET_MASTER_ADDR, which torchrun
would read, so the command passes the node rank and rendezvous address explicitly through
Kubernetes' $(VAR) expansion of those variables; torchrun then sets RANK, LOCAL_RANK and
WORLD_SIZE per worker process, which is all the workload reads.
"""

from __future__ import annotations

from typing import Any

from contract.stack import FINISHED_JOB_TTL_S
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.render import common
from runner.job.spec import JobSpec

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
CONTAINER = "pytorch"  # the operator finds the training container by this name
# Keep pods after the job ends so `runner fetch` can read their logs; the finished job (and its
# pods) are deleted by fetch, or by the operator after this TTL if nobody fetches (the same TTL
# the stack's TrainJob runtime sets).
TTL_AFTER_FINISHED_S = FINISHED_JOB_TTL_S
# A benchmark that failed once is a result, not something to retry: a rerun would change the
# time to accuracy. Pods are not restarted and the job fails on the first failure.
BACKOFF_LIMIT = 0


def render_pytorchjob(spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
    common.check_placement(spec, conn)
    labels = common.labels(spec)
    annotations = common.pod_annotations(spec, conn)
    replicas = {"Master": _replica(spec, conn, labels, annotations, 1)}
    if spec.placement.num_nodes > 1:
        count = spec.placement.num_nodes - 1
        replicas["Worker"] = _replica(spec, conn, labels, annotations, count)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.run_id, "namespace": conn.namespace, "labels": labels},
        "spec": {
            "nprocPerNode": str(spec.placement.procs_per_node),
            "runPolicy": {
                "cleanPodPolicy": "None",
                "backoffLimit": BACKOFF_LIMIT,
                "activeDeadlineSeconds": common.deadline_s(spec),
                "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            },
            "pytorchReplicaSpecs": replicas,
        },
    }


def torchrun_command(spec: JobSpec) -> list[str]:
    placement = spec.placement
    return [
        "torchrun",
        f"--nnodes={placement.num_nodes}",
        f"--nproc-per-node={placement.procs_per_node}",
        "--node-rank=$(RANK)",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        *common.torchrun_flags(),
    ]


def _replica(
    spec: JobSpec,
    conn: ClusterConnection,
    labels: dict[str, str],
    annotations: dict[str, str],
    count: int,
) -> dict[str, Any]:
    container = {
        "name": CONTAINER,
        "image": conn.image,
        "command": torchrun_command(spec),
        "args": common.workload_args(spec, conn),
        "env": common.launcher_env(spec),
        "resources": common.resources(spec, conn),
        "securityContext": common.container_security_context(),
        "volumeMounts": common.volume_mounts(conn),
    }
    pod_spec: dict[str, Any] = {
        "securityContext": common.pod_security_context(),
        "containers": [container],
        "volumes": common.volumes(spec, conn),
        **common.pod_isolation(),
        **common.scheduling(conn),
    }
    if conn.service_account:
        pod_spec["serviceAccountName"] = conn.service_account
    metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "replicas": count,
        "restartPolicy": "Never",
        "template": {"metadata": metadata, "spec": pod_spec},
    }
