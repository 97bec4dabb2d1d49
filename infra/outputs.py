"""The stack outputs: the only thing infra tells the runner, named once here.

The runner reads them with `pulumi stack output --json --show-secrets --stack NAME`. The
names and shapes are a fixed contract (shared/DESIGN.md section 2); tests assert every stack
exports exactly these. This module also holds the GPU taint/toleration pair, since the pool's
taint and the exported toleration must agree. It creates no resources.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

RESULTS_MOUNT_PATH = "/results"
TRAINING_RUNTIME = "torch-distributed"  # the ClusterTrainingRuntime the Trainer chart installs
SERVICE_ACCOUNT = "stackbench-runner"  # the Kubernetes service account jobs run as

# One taint on every GPU node, so that only pods asking for GPUs land there.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
GPU_TAINT_EFFECT = "NoSchedule"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# On every node of a cloud stack's training pool, so jobs never land on the system pool
# (which would skew a CPU scaling study); kind has one pool and needs no selector.
TRAIN_POOL_LABEL = "stackbench/pool"


@dataclass(frozen=True)
class StackOutputs:
    """Every exported output; values are plain values or pulumi Outputs.

    kubeconfig is the only secret. image is `repo@sha256:...`, never a tag. results_store is
    gs://, s3:// or file:///host/dir (kind mounts that directory at results_mount_path).
    """

    kubeconfig: Any
    provider: str
    namespace: str
    job_api: str
    image: Any
    # Selects the training pool (named node_selector, not gpu_: CPU stacks need one too).
    node_selector: Any
    gpu_tolerations: Any
    gpus_per_node: int
    num_nodes: int
    results_store: Any
    results_mount_path: str
    service_account: str
    training_runtime: str

    def export(self) -> None:
        import pulumi

        for name, value in self.as_dict().items():
            pulumi.export(name, value)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


OUTPUT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(StackOutputs))
SECRET_OUTPUTS = frozenset({"kubeconfig"})


def gpu_tolerations(has_gpus: bool) -> list[dict[str, str]]:
    """The toleration a job needs for the GPU pool's taint (none for CPU-only stacks)."""
    if not has_gpus:
        return []
    return [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}]
