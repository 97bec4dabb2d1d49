"""PyTorchJob (kubeflow.org/v1, training-operator 1.9): Master 1 + Worker n-1. A pure function.

training-operator 1.9 puts MASTER_ADDR, MASTER_PORT, RANK (the node's rank: master 0, worker i
is i+1), WORLD_SIZE (replicas x nprocPerNode), PET_NNODES, PET_NODE_RANK and PET_NPROC_PER_NODE
(nprocPerNode) in every `pytorch` container. It does not set PET_MASTER_ADDR, which torchrun
would read, so the command passes the node rank and rendezvous address explicitly through
Kubernetes' $(VAR) expansion of those variables; torchrun then sets RANK, LOCAL_RANK and
WORLD_SIZE per worker process, which is all the workload reads.

An elastic spec (--workers MIN:MAX) renders MAX Worker pods, no Master, and an
`elasticPolicy`; each pod runs one `python -m workloads.train ... --elastic MIN:MAX`, which
finds its group from the operator's PET_RDZV_ENDPOINT (docs/adaptive-elastic.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contract.stack import FINISHED_JOB_TTL_S
from runner.backends.kubernetes.render import common
from runner.job.spec import JobSpec

if TYPE_CHECKING:  # annotations only: the connection imports jobapis, which renders
    from runner.backends.kubernetes.connection import ClusterConnection

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
CONTAINER = "pytorch"  # the operator finds the training container by this name
# Keep pods after the job ends so `runner fetch` can read their logs; the finished job (and its
# pods) are deleted by fetch, or by the operator after this TTL if nobody fetches (the same TTL
# the stack's TrainJob runtime sets).
TTL_AFTER_FINISHED_S = FINISHED_JOB_TTL_S
# A benchmark that failed once is a result, not something to retry: a rerun would change the
# time to accuracy. Pods are not restarted (restartPolicy Never), and the operator marks the job
# Failed at the first failed pod (pytorchjob_controller.go, UpdateJobStatus). No backoffLimit:
# see run_policy.


def render_pytorchjob(spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
    common.check_placement(spec, conn)
    labels = common.labels(spec)
    annotations = common.pod_annotations(spec, conn)
    elastic: dict[str, Any] = {}
    if spec.placement.min_workers is not None:
        # Workers only, as the operator's elastic jobs are: it points PET_RDZV_ENDPOINT at
        # <job>-worker-0, which hosts the store (workloads/adaptive/elastic/launch.py).
        replicas = {"Worker": _replica(spec, conn, labels, annotations, spec.placement.num_nodes)}
        elastic = {"elasticPolicy": elastic_policy(spec)}
    else:
        replicas = {"Master": _replica(spec, conn, labels, annotations, 1)}
    if spec.placement.num_nodes > 1 and not elastic:
        count = spec.placement.num_nodes - 1
        replicas["Worker"] = _replica(spec, conn, labels, annotations, count)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.run_id, "namespace": conn.namespace, "labels": labels},
        "spec": {
            **elastic,
            "nprocPerNode": str(spec.placement.procs_per_node),
            "runPolicy": run_policy(spec),
            "pytorchReplicaSpecs": replicas,
        },
    }


def run_policy(spec: JobSpec) -> dict[str, Any]:
    """Pods kept after the end (cleanPodPolicy None) for their logs, one deadline, the TTL.
    No backoffLimit: with one, training-operator 1.9 answers a pod's failure by deleting every
    pod of the job, whatever cleanPodPolicy says (pkg/controller.v1/common/job.go,
    ReconcileJobs: a new failed pod with fewer active pods than replicas exceeds a backoffLimit
    of 0, and DeletePodsAndServices honours cleanPodPolicy only for a job already marked
    finished). That would take the failing rank's log, the run's reason, with it, and an
    elastic run's survivors. Without it the operator marks the job Failed and keeps the pods
    (observe.elastic_end reads an elastic run's end from them)."""
    return {
        "cleanPodPolicy": "None",
        "activeDeadlineSeconds": common.deadline_s(spec),
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
    }


def elastic_policy(spec: JobSpec) -> dict[str, Any]:
    """--workers MIN:MAX as the operator's elasticPolicy: MAX pods start (the Worker
    replicas), the run goes on while MIN are left. The workers re-form their group in place
    (not torchrun's agent, which would restart them all), so the operator restarts nothing:
    maxRestarts 0, as no pod is restarted; c10d is the rendezvous backend the endpoint names."""
    assert spec.placement.min_workers is not None
    return {
        "minReplicas": spec.placement.min_workers,
        "maxReplicas": spec.placement.num_nodes,
        "rdzvBackend": "c10d",
        "maxRestarts": 0,
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
    if spec.placement.min_workers is None:
        command = {"command": torchrun_command(spec), "args": common.workload_args(spec, conn)}
    else:  # each pod one elastic worker, started directly (workloads/train.py --elastic)
        command = {"command": common.workload_args(spec, conn)}
    container = {
        "name": CONTAINER,
        "image": conn.image,
        **command,
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
