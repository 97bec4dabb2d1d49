"""Reading a Kubeflow job from what the API server says about it: the job's state and, while it
is pending, why. An elastic PyTorchJob's end is read from its pods, not from the operator's
conditions (elastic_end). (Which pod runs which node: pods.py; which rank wrote which log
line: demux.py.)

Pure functions over the JSON objects (job, pods, events); no client, no clock of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contract.rundir import JobState, JobStatus
from runner.backends.kubernetes.follow import overtime
from runner.backends.kubernetes.follow.pods import PodOwner, pods_by_node
from runner.backends.kubernetes.jobapis import JOB_KINDS, JobKind, Shape

ELASTIC = JOB_KINDS["pytorchjob"]  # the one API with elastic jobs (elastic_end)

# A job that ended has its API's success condition (jobapis.py) or Failed True; both APIs keep a
# list of conditions.
ENDED_PHASES = frozenset({"Succeeded", "Failed"})
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


def job_uid(job: Mapping[str, Any] | None) -> str | None:
    uid = (job or {}).get("metadata", {}).get("uid")
    return uid if isinstance(uid, str) and uid else None


def job_status(
    kind: JobKind,
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    owner: PodOwner | None = None,
) -> JobStatus:
    """`owner`: which pods are the job's (owners.py); None: by the job's uid alone, which
    tells a TrainJob's pods from no other job's."""
    name = job["metadata"]["name"]
    conditions = {c.get("type"): c for c in job.get("status", {}).get("conditions") or []}
    shape = kind.shape(job)
    owner = owner or PodOwner(job_uid(job))
    by_node = pods_by_node(kind, pods, shape.elastic, owner)
    if shape.elastic and any(_phase(p) == "Running" for p in by_node.values()):
        conditions = {}  # the workers go on whatever the operator says (elastic_end)
    elif shape.elastic and _phase(by_node.get(0, {})) in ENDED_PHASES:
        return elastic_end(job, by_node, shape.num_nodes)
    done = conditions.get(kind.success, {})
    if done.get("status") == "True":
        return _succeeded(kind, done, by_node, shape.num_nodes)
    failed = conditions.get("Failed", {})
    if failed.get("status") == "True":
        return _failed(kind, failed, by_node, job)
    # Pods that ran and ended count as started: the job's own condition comes a moment later.
    started = [p for p in by_node.values() if container_started(p)]
    if len(started) == shape.num_nodes:
        starts = [p["status"].get("startTime") or "" for p in started]
        return JobStatus(JobState.RUNNING, since=max(starts) or None)
    reason = pending_reason(name, shape, by_node, events)
    return JobStatus(
        JobState.PENDING, reason=reason, since=job["metadata"].get("creationTimestamp")
    )


def elastic_end(
    job: Mapping[str, Any], by_node: Mapping[int, Mapping[str, Any]], num_nodes: int
) -> JobStatus:
    """How an elastic PyTorchJob ended, once worker 0 (the store's host and the record's
    writer) has ended and no worker runs: SUCCEEDED when worker 0 exited 0 and at least
    elasticPolicy.minReplicas workers did, FAILED otherwise; the reason names the pods that
    left. The operator's conditions are not used: training-operator 1.9 marks a Worker-only
    job Failed as soon as one Worker pod fails under restartPolicy Never
    (pkg/controller.v1/pytorch/pytorchjob_controller.go, UpdateJobStatus: `failed > 0 &&
    specReplicas > succeeded+running`), and Succeeded as soon as any Worker succeeded when it
    has an elasticPolicy (`expected == 0 || (ElasticPolicy != nil && succeeded > 0)`); once
    either is set, ReconcileJobs (pkg/controller.v1/common/job.go) never updates the status
    again, so the first departure would stay the job's verdict while the survivors finish."""
    min_workers = _min_replicas(job, num_nodes)
    finished = [n for n in range(num_nodes) if _phase(by_node.get(n, {})) == "Succeeded"]
    left = [n for n in range(num_nodes) if n not in finished]
    exits = "; ".join(_left(n, by_node.get(n)) for n in left)
    writer_done = 0 in finished
    if writer_done and len(finished) >= min_workers:
        note = f"finished with {len(finished)} of {num_nodes} workers ({exits})" if left else ""
        return JobStatus(JobState.SUCCEEDED, note, since=_ended_at(by_node))
    if not writer_done:
        why = "worker 0, which hosts the store and writes the run's record, did not finish"
    else:
        why = f"{len(finished)} worker(s) finished; the run needs at least {min_workers}"
    code = next((c for c in (_exit_code(by_node.get(n)) for n in left) if c), None)
    return JobStatus(JobState.FAILED, f"{why} ({exits})",
                     since=_ended_at(by_node), exit_code=code)  # fmt: skip


def _min_replicas(job: Mapping[str, Any], num_nodes: int) -> int:
    """elasticPolicy.minReplicas; garbage reads as every worker (the strictest)."""
    spec = job.get("spec")
    policy = spec.get("elasticPolicy") if isinstance(spec, Mapping) else None
    value = policy.get("minReplicas") if isinstance(policy, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= num_nodes:
        return value
    return num_nodes


def _left(node: int, pod: Mapping[str, Any] | None) -> str:
    """How one worker left, in a few words."""
    if pod is None:
        return f"worker {node} has no pod"
    if not container_started(pod):
        return f"pod {_name(pod)} never started"
    term = _terminated(pod)
    why = f" ({term['reason']})" if term.get("reason") else ""
    return f"pod {_name(pod)} exited with code {term.get('exitCode', '?')}{why}"


def _terminated(pod: Mapping[str, Any] | None, kind: JobKind = ELASTIC) -> Mapping[str, Any]:
    """The job container's `terminated` state (empty while it has none)."""
    for status in (pod or {}).get("status", {}).get("containerStatuses") or []:
        if status.get("name") == kind.container:
            return (status.get("state") or {}).get("terminated") or {}
    return {}


def _exit_code(pod: Mapping[str, Any] | None, kind: JobKind = ELASTIC) -> int | None:
    code = _terminated(pod, kind).get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _ended_at(by_node: Mapping[int, Mapping[str, Any]]) -> str | None:
    """When the last worker's container ended (RFC 3339 strings sort as the times do)."""
    ends = [str(_terminated(p).get("finishedAt") or "") for p in by_node.values()]
    return max(ends) or None


def pending_reason(
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


def _succeeded(
    kind: JobKind,
    condition: Mapping[str, Any],
    by_node: Mapping[int, Mapping[str, Any]],
    num_nodes: int,
) -> JobStatus:
    """The job's success condition, unless a node's pod failed, or has not ended yet (RUNNING,
    awaiting_ends). training-operator 1.9 marks a PyTorchJob with a Master Succeeded as soon
    as the Master's pod succeeds, whatever its Workers did or still do
    (pytorchjob_controller.go, UpdateJobStatus: the Master's `expected == 0` returns before a
    Worker's `failed > 0` is looked at, in Go's map order), so a worker whose processes exited
    non-zero, or are still running, would otherwise make a SUCCEEDED run (overtime.py bounds
    the wait)."""
    since = condition.get("lastTransitionTime")
    for node in range(num_nodes):
        pod = by_node.get(node)
        if pod is None or not _pod_failed(kind, pod):
            continue
        code, term = _exit_code(pod, kind), _terminated(pod, kind)
        why = f" ({term['reason']})" if term.get("reason") else ""
        how = f"exited with code {code}{why}" if code else "failed"
        return JobStatus(
            JobState.FAILED,
            reason=f"the job reports success, but node {node} (pod {_name(pod)}) {how}",
            since=since,
            exit_code=code or None,
        )
    # A TrainJob's JobSet completes only once every pod has; a PyTorchJob at its Master's.
    running = [(n, p) for n, p in sorted(by_node.items()) if n < num_nodes and not _ended(p)]
    if running and not kind.ends_with_its_pods:  # a pod that is gone cannot say: not waited for
        node, pod = running[0]
        return overtime.awaiting(f"node {node} (pod {_name(pod)})", since)
    unproven = _unproven(kind, by_node, num_nodes)
    if unproven:
        # As for a local run: success is every process's exit 0, seen. A controller's word
        # alone (a JobSet completed by hand, a controller's bug) is not a run.
        reason = f"the job reports {kind.success}, but {unproven}"
        return JobStatus(JobState.FAILED, reason=reason, since=since)
    return JobStatus(JobState.SUCCEEDED, since=since)


def _unproven(kind: JobKind, by_node: Mapping[int, Mapping[str, Any]], num_nodes: int) -> str:
    """Which node has not shown that it ran and exited 0: no pod, or a pod whose job container
    records no exit ("" when every node has)."""
    missing = [n for n in range(num_nodes) if n not in by_node]
    if len(missing) == num_nodes:
        return "no pod of it ever existed (or all are gone): nothing ran that the run can show"
    if missing:
        nodes = ", ".join(str(n) for n in missing)
        return f"node(s) {nodes} left no pod, so nothing shows that their processes ran"
    for node in range(num_nodes):
        pod = by_node[node]
        if _exit_code(pod, kind) is None and _ended(pod):
            return f"node {node} (pod {_name(pod)}) records no exit of its job container"
    return ""


def _ended(pod: Mapping[str, Any]) -> bool:
    return _phase(pod) in ENDED_PHASES


def _pod_failed(kind: JobKind, pod: Mapping[str, Any]) -> bool:
    """Whether the pod ended in failure: its phase, or its job container's non-zero exit."""
    return _phase(pod) == "Failed" or _exit_code(pod, kind) not in (None, 0)


def _failed(
    kind: JobKind,
    condition: Mapping[str, Any],
    by_node: Mapping[int, Mapping[str, Any]],
    job: Mapping[str, Any] | None = None,
) -> JobStatus:
    reason = condition.get("message") or condition.get("reason") or "the job failed"
    if overtime.past_deadline(condition):
        # Every pod's exit (SIGTERM, 143) is the deadline's doing: naming one would blame a
        # rank for what the cluster did to all of them.
        return JobStatus(JobState.FAILED, reason=f"{reason} ({overtime.deadline_note(job or {})})",
                         since=condition.get("lastTransitionTime"))  # fmt: skip
    for node, pod in sorted(by_node.items()):
        for status in pod.get("status", {}).get("containerStatuses") or []:
            term = (status.get("state") or {}).get("terminated") or {}
            code = term.get("exitCode")
            if status.get("name") == kind.container and code not in (None, 0):
                why = f" ({term['reason']})" if term.get("reason") else ""
                return JobStatus(
                    JobState.FAILED,
                    reason=f"{reason}; node {node} (pod {_name(pod)}) exited with code {code}{why}",
                    since=condition.get("lastTransitionTime"),
                    exit_code=int(code),
                )
    return JobStatus(JobState.FAILED, reason=reason, since=condition.get("lastTransitionTime"))


def _phase(pod: Mapping[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase") or "")


def _running_nodes(by_node: Mapping[int, Mapping[str, Any]]) -> set[int]:
    return {n for n, p in by_node.items() if p.get("status", {}).get("phase") == "Running"}


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", "?"))


def _event_time(event: Mapping[str, Any]) -> str:
    # RFC 3339 in UTC, as the API server writes them: the strings sort as the times do.
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")
