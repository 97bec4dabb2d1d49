"""Shared builders for the Kubernetes tests: specs, connections, backends against the fake API
server, submits as runner.api makes them, and pods as the controllers and the kubelet would."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from contract import files
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.backend import KubernetesBackend
from runner.backends.kubernetes.connection import ClusterConnection
from runner.backends.kubernetes.follow.reflector import WatchConfig
from runner.job.spec import JobSpec, Placement, resolve
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster

IMAGE = "ghcr.io/stackbench/train@sha256:" + "ab" * 32
RUN_ID = "cnn-digits-20300101-000000-beef"


def make_spec(nodes: int = 2, procs: int = 2, device: str = "cuda") -> JobSpec:
    placement = Placement(num_nodes=nodes, procs_per_node=procs, device=device)  # type: ignore[arg-type]
    spec = resolve("cnn-digits", ["seed=7"], placement, run_id=RUN_ID)
    # A fixed creation time keeps golden files stable.
    return JobSpec.from_dict({**spec.to_dict(), "created_at": "2030-01-01T00:00:00+00:00"})


def stack_connection(
    job_api: str = "trainjob",
    store: str | None = "gs://bench-results",
    kubeconfig: str = "{}",
    namespace: str = "bench",
) -> ClusterConnection:
    return ClusterConnection(
        kubeconfig=kubeconfig,
        namespace=namespace,
        job_api=job_api,  # type: ignore[arg-type]
        image=IMAGE,
        provider="gke",
        node_selector=MappingProxyType({"cloud.google.com/gke-accelerator": "nvidia-l4"}),
        gpu_tolerations=(
            MappingProxyType(
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ),
        ),
        gpus_per_node=4,
        num_nodes=4,
        results_store=store,
        service_account="stackbench-runner",
        stack="gke-gpu-8",
    )


def iso(seconds_after: float = 0.0) -> str:
    base = datetime(2030, 1, 1, tzinfo=UTC).timestamp()
    return datetime.fromtimestamp(base + seconds_after, UTC).isoformat().replace("+00:00", "Z")


def pod(
    job_api: str, name: str, node: int, phase: str = "Running", **status: Any
) -> dict[str, Any]:
    """A pod of node `node`, labelled as TrainJob (JobSet) or PyTorchJob (operator) pods are:
    a TrainJob's names its JobSet (the fake cluster's add_pod adds that JobSet's uid)."""
    labels = {"stackbench/run-id": name}
    annotations = {}
    if job_api == "trainjob":
        pod_name = f"{name}-node-0-{node}-x{node}"
        labels["jobset.sigs.k8s.io/jobset-name"] = name
        annotations["batch.kubernetes.io/job-completion-index"] = str(node)
        container = "node"
    else:
        kind, index = ("master", 0) if node == 0 else ("worker", node - 1)
        pod_name = f"{name}-{kind}-{index}"
        labels |= {"training.kubeflow.org/replica-type": kind,
                   "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
        container = "pytorch"
    state = {
        "Running": {"running": {"startedAt": iso(60)}},
        "Succeeded": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        "Failed": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }.get(phase, {})
    statuses = [{"name": container, "restartCount": 0, "state": state}]
    body = {"phase": phase, "startTime": iso(60), "containerStatuses": statuses}
    body.update(status)
    meta = {"name": pod_name, "labels": labels, "annotations": annotations,
            "creationTimestamp": iso(5)}  # fmt: skip
    return {"metadata": meta, "status": body}


# A watch that reconnects and gives up fast, so the tests' faults play out in milliseconds.
FAST_WATCH = WatchConfig(
    min_timeout_s=5, backoff_initial_s=0.01, backoff_max_s=0.05, jitter=0, give_up_s=2
)


# Every backend make_backend made, for the `cluster` fixture to close after its test (their
# client connections' sockets were otherwise left to the garbage collector).
MADE: list[KubernetesBackend] = []


def make_backend(
    cluster: FakeCluster, root: Path, job_api: str, store: str | None = None, **kwargs: Any
) -> KubernetesBackend:
    conn = stack_connection(job_api, store, kubeconfig=cluster.kubeconfig())
    kwargs.setdefault("watch_config", FAST_WATCH)
    backend = KubernetesBackend(
        conn,
        results_root=root,
        api_factory=lambda c: KubeApi(c, max_attempts=3, retry_backoff_s=0.001),
        **kwargs,
    )
    MADE.append(backend)
    return backend


def close_made_backends() -> None:
    while MADE:
        MADE.pop().close()


def submit(backend: KubernetesBackend, root: Path, spec: JobSpec) -> tuple[str, Path]:
    """What runner.api.submit does with the protocol: the request, its handle recorded in
    job.json before anything starts, then the submit."""
    request = backend.dryrun(spec, root / spec.run_id)
    handle = backend.handle(request)
    run_dir = rundir.create(root, rundir.RunRecord(spec, "kubernetes", handle, backend.reference))
    assert backend.submit(request) == handle
    return handle, run_dir


def recorded_uid(run_dir: Path) -> Any:
    """The uid of the job the run recorded in its job.json (None in one from before uids)."""
    return files.read_json(run_dir / rundir.JOB)["cluster"].get("job_uid")


def complete(cluster: FakeCluster, job_api: str, name: str = RUN_ID, nodes: int = 2) -> None:
    """The job ends well as the controllers and the kubelet show it: every node's pod exited 0,
    then the job's success condition."""
    for node in range(nodes):
        cluster.add_pod(pod(job_api, name, node, "Succeeded"))
    cluster.set_job_condition(job_api, name, "Complete" if job_api == "trainjob" else "Succeeded")
