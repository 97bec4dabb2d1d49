"""One object per Kubeflow job API (TrainJob, PyTorchJob), owning everything that differs
between them: the resource and the add-on that serves it, the rendered manifest, the job
container's name, the success condition, how a job's shape and a pod's node are read, how a
pod is known to be the job's, and whether the job ends only with its pods. The connection
carries one (`ClusterConnection.kind`); nothing else asks which API it is.

Imports nothing of the client, so that the CLI's start-up path may import it; the renderers are
imported when a job is rendered.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.backends.kubernetes.connection import ClusterConnection
    from runner.job.spec import JobSpec

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # TrainJob (JobSet) pods
REPLICA_TYPE = "training.kubeflow.org/replica-type"  # PyTorchJob pods
REPLICA_INDEX = "training.kubeflow.org/replica-index"


@dataclass(frozen=True)
class JobResource:
    group: str
    version: str
    plural: str
    kind: str
    addon: str  # what the stack must install for this API to exist


# What Kubeflow Trainer makes of a TrainJob, under the job's name; it makes the job's pods.
JOBSET = JobResource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", "JobSet")


@dataclass(frozen=True)
class Shape:
    """How many nodes (pods) and processes per node a submitted job has."""

    num_nodes: int
    procs_per_node: int
    elastic: bool = False  # Worker replicas only, worker i is node i (demux.NodeRanks)

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.procs_per_node


class JobKind(abc.ABC):
    """What one job API is to the runner."""

    name: str  # as the stack's `job_api` and --job-api say it
    resource: JobResource
    container: str  # the job container of every pod
    success: str  # the condition the controller sets True when the job succeeded
    other: str  # the other API, suggested when this one is not installed
    has_runtime: bool  # runs against a ClusterTrainingRuntime (--runtime)
    # The controller says success only once every pod has ended (a TrainJob's JobSet); else a
    # success may come while pods still run, and they are waited for (overtime.py).
    ends_with_its_pods: bool
    # Its pods name the job itself in an owner reference (else a JobSet between, owners.py).
    owner_references: bool

    @abc.abstractmethod
    def render(self, spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
        """The job's manifest (render/)."""

    @abc.abstractmethod
    def shape(self, job: Mapping[str, Any]) -> Shape:
        """Nodes and processes per node, from the job as the API server has it."""

    @abc.abstractmethod
    def node_rank(self, pod: Mapping[str, Any], elastic: bool = False) -> int | None:
        """The node a pod runs, from the labels and annotations its controller sets (never
        from anything the pod writes); None for a pod that has none, or garbage."""


class TrainJob(JobKind):
    name = "trainjob"
    resource = JobResource(
        "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", "Kubeflow Trainer (v2)"
    )
    container = "node"
    success = "Complete"
    other = "pytorchjob"
    has_runtime = True
    ends_with_its_pods = True
    owner_references = False

    def render(self, spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
        from runner.backends.kubernetes.render.trainjob import render_trainjob

        return render_trainjob(spec, conn)

    def shape(self, job: Mapping[str, Any]) -> Shape:
        trainer = job.get("spec", {}).get("trainer", {})
        return Shape(int(trainer.get("numNodes", 1)), int(trainer.get("numProcPerNode", 1)))

    def node_rank(self, pod: Mapping[str, Any], elastic: bool = False) -> int | None:
        meta = pod.get("metadata", {})
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        return _index(annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX)))


class PyTorchJob(JobKind):
    name = "pytorchjob"
    resource = JobResource(
        "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "Kubeflow training-operator (v1)"
    )
    container = "pytorch"
    success = "Succeeded"
    other = "trainjob"
    has_runtime = False
    ends_with_its_pods = False
    owner_references = True

    def render(self, spec: JobSpec, conn: ClusterConnection) -> dict[str, Any]:
        from runner.backends.kubernetes.render.pytorchjob import render_pytorchjob

        return render_pytorchjob(spec, conn)

    def shape(self, job: Mapping[str, Any]) -> Shape:
        spec = job.get("spec", {})
        replicas = spec.get("pytorchReplicaSpecs", {})
        nodes = sum(int(r.get("replicas", 1)) for r in replicas.values())
        return Shape(nodes, int(spec.get("nprocPerNode", "1")), "elasticPolicy" in spec)

    def node_rank(self, pod: Mapping[str, Any], elastic: bool = False) -> int | None:
        """The Master is node 0 and worker i node i + 1, but an elastic job (`elastic`) has
        Workers only."""
        labels = pod.get("metadata", {}).get("labels") or {}
        kind, index = str(labels.get(REPLICA_TYPE, "")).lower(), _index(labels.get(REPLICA_INDEX))
        if index is None or kind not in ("master", "worker"):
            return None
        if elastic:
            return index if kind == "worker" else None
        return index + (1 if kind == "worker" else 0)


JOB_KINDS: dict[str, JobKind] = {k.name: k for k in (TrainJob(), PyTorchJob())}


def _index(value: Any) -> int | None:
    text = str(value) if value is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 7 else None
