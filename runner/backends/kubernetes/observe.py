"""Reading a Kubeflow job from what the API server says about it: the job's state and, while it
is pending, why; which pod runs which node. (Which rank wrote which log line: demux.py.)

Pure functions over the JSON objects (job, pods, events); no client, no clock of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.rundir import JobState, JobStatus

# The conditions each API sets when a job ends (TrainJob: Complete/Failed; PyTorchJob 1.9:
# Succeeded/Failed; both keep a list, the terminal condition is True).
SUCCESS_CONDITIONS = {"trainjob": "Complete", "pytorchjob": "Succeeded"}
CONTAINERS = {"trainjob": "node", "pytorchjob": "pytorch"}
# Waiting reasons of a container that mean the pod will not start without a change.
STUCK_WAITING = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
    }
)
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # TrainJob (JobSet) pods
REPLICA_TYPE = "training.kubeflow.org/replica-type"  # PyTorchJob pods
REPLICA_INDEX = "training.kubeflow.org/replica-index"


@dataclass(frozen=True)
class Shape:
    """How many nodes (pods) and processes per node a submitted job has."""

    num_nodes: int
    procs_per_node: int

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.procs_per_node


def job_shape(job_api: str, job: Mapping[str, Any]) -> Shape:
    spec = job.get("spec", {})
    if job_api == "trainjob":
        trainer = spec.get("trainer", {})
        return Shape(int(trainer.get("numNodes", 1)), int(trainer.get("numProcPerNode", 1)))
    replicas = spec.get("pytorchReplicaSpecs", {})
    nodes = sum(int(r.get("replicas", 1)) for r in replicas.values())
    return Shape(nodes, int(spec.get("nprocPerNode", "1")))


def node_rank(job_api: str, pod: Mapping[str, Any]) -> int | None:
    """The node a pod runs, from the labels and annotations its controller sets (never from
    anything the pod writes); None for a pod that has none, or garbage."""
    meta = pod.get("metadata", {})
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if job_api == "trainjob":
        return _index(annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX)))
    kind, index = str(labels.get(REPLICA_TYPE, "")).lower(), _index(labels.get(REPLICA_INDEX))
    if index is None or kind not in ("master", "worker"):
        return None
    return index + (1 if kind == "worker" else 0)


def _index(value: Any) -> int | None:
    text = str(value) if value is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 7 else None


def pods_by_node(job_api: str, pods: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """The newest pod of each node: a replaced pod's successor is the one that counts."""
    newest: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        node = node_rank(job_api, pod)
        if node is None:
            continue
        if node not in newest or _created(pod) >= _created(newest[node]):
            newest[node] = pod
    return newest


def job_status(
    job_api: str,
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
) -> JobStatus:
    name = job["metadata"]["name"]
    conditions = {c.get("type"): c for c in job.get("status", {}).get("conditions") or []}
    by_node = pods_by_node(job_api, pods)
    done = conditions.get(SUCCESS_CONDITIONS[job_api], {})
    if done.get("status") == "True":
        return JobStatus(JobState.SUCCEEDED, since=done.get("lastTransitionTime"))
    failed = conditions.get("Failed", {})
    if failed.get("status") == "True":
        return _failed(job_api, failed, by_node)
    shape = job_shape(job_api, job)
    # Pods that ran and ended count as started: the job's own condition comes a moment later.
    started = [p for p in by_node.values() if container_started(p)]
    if len(started) == shape.num_nodes:
        starts = [p["status"].get("startTime") or "" for p in started]
        return JobStatus(JobState.RUNNING, since=max(starts) or None)
    reason = pending_reason(job_api, name, shape, by_node, events)
    return JobStatus(
        JobState.PENDING, reason=reason, since=job["metadata"].get("creationTimestamp")
    )


def pending_reason(
    job_api: str,
    name: str,
    shape: Shape,
    by_node: Mapping[int, Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
) -> str:
    """The most telling reason a job is not running yet, in the cluster's own words."""
    for node, pod in sorted(by_node.items()):
        for status in pod.get("status", {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING:
                detail = f": {waiting['message']}" if waiting.get("message") else ""
                return f"node {node} (pod {_name(pod)}): {waiting['reason']}{detail}"
    for node, pod in sorted(by_node.items()):
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                why = cond.get("message") or cond.get("reason") or "unschedulable"
                return f"node {node} (pod {_name(pod)}) cannot be scheduled: {why}"
    event = latest_warning(name, events)
    if event is not None:
        obj = event.get("involvedObject", {})
        return (
            f"{event.get('reason')} on {obj.get('kind', 'object')} {obj.get('name')}: "
            + (event.get("message") or "").strip()
        )
    if not by_node:
        return "waiting for the job controller to create the pods"
    waiting = sorted(set(range(shape.num_nodes)) - _running_nodes(by_node))
    return f"{shape.num_nodes - len(waiting)}/{shape.num_nodes} pods running; waiting for " + (
        ", ".join(f"node {n}" for n in waiting)
    )


def latest_warning(name: str, events: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest Warning about this job or anything it made (their names start with it)."""
    mine = [
        e
        for e in events
        if e.get("type") == "Warning"
        and str(e.get("involvedObject", {}).get("name", "")).startswith(name)
    ]
    return max(mine, key=_event_time, default=None)


def container_key(pod: Mapping[str, Any], container: str) -> tuple[str, int]:
    """Identifies one run of a container: the pod's uid and the container's restart count."""
    restarts = 0
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == container:
            restarts = int(status.get("restartCount", 0))
    return str(pod.get("metadata", {}).get("uid", "")), restarts


def container_started(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed")


def container_running(pod: Mapping[str, Any], container: str) -> bool:
    """Whether the kubelet last reported the container running (its log may still grow)."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return "running" in (status.get("state") or {})
    return pod.get("status", {}).get("phase") == "Running"


def _failed(
    job_api: str, condition: Mapping[str, Any], by_node: Mapping[int, Mapping[str, Any]]
) -> JobStatus:
    reason = condition.get("message") or condition.get("reason") or "the job failed"
    for node, pod in sorted(by_node.items()):
        for status in pod.get("status", {}).get("containerStatuses") or []:
            term = (status.get("state") or {}).get("terminated") or {}
            code = term.get("exitCode")
            if status.get("name") == CONTAINERS[job_api] and code not in (None, 0):
                why = f" ({term['reason']})" if term.get("reason") else ""
                return JobStatus(
                    JobState.FAILED,
                    reason=f"{reason}; node {node} (pod {_name(pod)}) exited with code {code}{why}",
                    since=condition.get("lastTransitionTime"),
                    exit_code=int(code),
                )
    return JobStatus(JobState.FAILED, reason=reason, since=condition.get("lastTransitionTime"))


def _running_nodes(by_node: Mapping[int, Mapping[str, Any]]) -> set[int]:
    return {n for n, p in by_node.items() if p.get("status", {}).get("phase") == "Running"}


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", "?"))


def _created(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("creationTimestamp") or "")


def _event_time(event: Mapping[str, Any]) -> str:
    # RFC 3339 in UTC, as the API server writes them: the strings sort as the times do.
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")
