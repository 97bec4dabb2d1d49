"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer 2.x) against the cluster's
`torch-distributed` ClusterTrainingRuntime. A pure function; it does not talk to the cluster.

The runtime's torch plugin sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR
and PET_MASTER_PORT in the `node` container, and torchrun reads its options from exactly those
variables, so the command is `torchrun` with only the flags that shape logging. Pod-level
settings (security, volumes, GPU scheduling, labels, annotations) go in a runtime patch on the
`node` replicated job: a TrainJob has no pod template of its own. A patch cannot set
automountServiceAccountToken, enableServiceLinks or a TTL: on a stack, its runtime and service
account set them (infra/runtime.py, infra/addons.py); on a cluster made elsewhere, they are
that cluster's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.backends.kubernetes.render import common
from runner.errors import SpecError
from runner.job.spec import JobSpec

if TYPE_CHECKING:  # annotations only: the connection imports jobapis, which renders
    from runner.backends.kubernetes.connection import ClusterConnection

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
REPLICATED_JOB = "node"  # the runtime's replicated job and container name
PATCH_MANAGER = "stackbench.dev/runner"


def render_trainjob(spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
    common.check_placement(spec, conn)
    if spec.placement.min_workers is not None:
        raise SpecError(
            "--workers", "TrainJob (Kubeflow Trainer 2.3) has no elastic policy: run MIN:MAX "
            "with the PyTorchJob API (--job-api pytorchjob) or give a fixed N"
        )  # fmt: skip
    labels = common.labels(spec)
    annotations = common.pod_annotations(spec, conn)
    trainer = {
        "numNodes": spec.placement.num_nodes,
        "numProcPerNode": spec.placement.procs_per_node,
        "image": conn.image,
        "command": ["torchrun", *common.torchrun_flags()],
        "args": common.workload_args(spec, conn),
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *common.launcher_env(spec)],
        "resourcesPerNode": common.resources(spec, conn),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.run_id, "namespace": conn.namespace, "labels": labels},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": conn.training_runtime,
            },
            "activeDeadlineSeconds": common.deadline_s(spec),
            "trainer": trainer,
            "runtimePatches": [_pod_patch(spec, conn, labels, annotations)],
        },
    }


def _pod_patch(
    spec: JobSpec, conn: ClusterConnection, labels: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "securityContext": common.pod_security_context(),
        "volumes": common.volumes(spec, conn),
        "containers": [
            {
                "name": REPLICATED_JOB,
                "securityContext": common.container_security_context(),
                "volumeMounts": common.volume_mounts(conn),
            }
        ],
        **common.scheduling(conn),
    }
    if conn.service_account:
        pod_spec["serviceAccountName"] = conn.service_account
    pod_metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        pod_metadata["annotations"] = dict(annotations)
    job_patch = {"template": {"spec": {"template": {"metadata": pod_metadata, "spec": pod_spec}}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"replicatedJobs": [{"name": REPLICATED_JOB, **job_patch}]},
            }
        },
    }
