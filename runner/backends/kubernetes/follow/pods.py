"""Which pod runs which node of a Kubeflow job, and which of the pods that carry a run's label
are its job's: the labels and owner references each job API's controllers set, never anything
a pod writes. Pure functions over the JSON objects. (Which job a run is: identity.py; which
JobSet a TrainJob's pods name: owners.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.backends.kubernetes.jobapis import JobKind

# What JobSet labels every pod of its jobs with (JobSetNameKey and JobSetUIDKey of
# sigs.k8s.io/jobset, api/jobset/v1alpha2/jobset_types.go).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"


@dataclass(frozen=True)
class PodOwner:
    """Which of the pods that carry the run's label (their selector) are its job's: the pods of
    a job deleted and made again under the same name carry it too, and linger while they
    terminate. A PyTorchJob's pods name their job's uid in an owner reference. A TrainJob's
    name a batch Job that its JobSet made; the JobSet labels them with its own name and uid,
    so they are the job's when those are its JobSet's (owners.py finds which is).

    `job_uid` None: the job is known by its name only, and any pod of the label is its."""

    job_uid: str | None = None
    # TrainJob, its JobSet found: (name, uid); (name, None) while it has none (no pod is its).
    jobset: tuple[str, str | None] | None = None
    # TrainJob whose JobSet cannot be read, or labels no pod with its uid: a pod made before
    # the job is another job's.
    not_before: str | None = None

    def owns(self, kind: JobKind, pod: Mapping[str, Any]) -> bool:
        if not self.job_uid:
            return True
        meta = pod.get("metadata", {})
        if kind.owner_references:
            refs = meta.get("ownerReferences") or []
            owner = kind.resource.kind
            return all(r.get("uid") == self.job_uid for r in refs if r.get("kind") == owner)
        if self.jobset is not None:
            labels = meta.get("labels") or {}
            name, uid = self.jobset
            if uid is None or labels.get(JOBSET_NAME) != name:
                return False
            if JOBSET_UID in labels:
                return labels[JOBSET_UID] == uid
            # JobSet before v0.9 (Trainer 2.0 ships 0.8) does not label pods with its uid.
        # RFC 3339 in UTC, as the API server writes them: the strings sort as the times do.
        return self.not_before is None or created(pod) >= self.not_before


def pods_by_node(
    kind: JobKind,
    pods: Iterable[Mapping[str, Any]],
    elastic: bool = False,
    owner: PodOwner = PodOwner(),
) -> dict[int, Mapping[str, Any]]:
    """The newest pod of each node: a replaced pod's successor is the one that counts. A pod
    that `owner` does not own (another job's of the same name) is none of this job's."""
    newest: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        node = kind.node_rank(pod, elastic)
        if node is None or not owner.owns(kind, pod):
            continue
        if node not in newest or created(pod) >= created(newest[node]):
            newest[node] = pod
    return newest


def created(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("creationTimestamp") or "")
