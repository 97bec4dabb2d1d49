"""CPU, memory and GPU requests and limits of a job pod. A pure function of (placement, cluster).

Each job pod runs on its own node and holds `procs_per_node` processes. A stack exports what one
job pod may use of a training node (`node_job_resources`: the machine's capacity less what
Kubernetes, the cloud and the per-node daemons keep; infra/shapes.py has that formula). The pod
asks for the share of it its processes are entitled to:

    slots    = GPUs per node for a cuda run, else the node's whole cores (at least 1)
    share    = min(1, procs_per_node / slots)
    cpu      = share x node cpu, rounded down to 10 millicores
    memory   = share x node memory, rounded down to a MiB
    requests = limits = {cpu, memory}, plus nvidia.com/gpu = procs_per_node on a cuda run

so a one-GPU run on an eight-GPU node takes an eighth of its CPU and memory and leaves room for
seven more, and a full-node run gets the whole node. Requests equal to limits make the pod
Guaranteed QoS: it is the last to be evicted, and it cannot borrow idle CPU that another run
would later take back, so a run's speed does not depend on what else happens to be running.

When the shape is unknown (a cluster given by --kubeconfig, kind, whose nodes share one host,
or a machine type the stack does not tabulate), each process requests 1 CPU and 2 GiB, small
enough to schedule on any node that can train at all, and is limited to 4 CPUs and 8 GiB, so a
runaway process is stopped before it starves the node's kubelet. /dev/shm, a memory-backed
emptyDir, counts against the memory limit.
"""

from __future__ import annotations

from typing import Any

from contract.stack import NodeResources
from runner.job.spec import Placement

GPU_RESOURCE = "nvidia.com/gpu"
# Per process, when the node's shape is unknown (see the module docstring).
UNKNOWN_REQUEST = NodeResources(cpu_m=1000, memory_mib=2048)
UNKNOWN_LIMIT = NodeResources(cpu_m=4000, memory_mib=8192)


def pod_resources(
    placement: Placement, node: NodeResources | None, gpus_per_node: int | None
) -> dict[str, Any]:
    """The node container's `resources` (TrainJob: trainer.resourcesPerNode)."""
    procs = placement.procs_per_node
    if node is None:
        requests = _quantities(_times(UNKNOWN_REQUEST, procs))
        limits = _quantities(_times(UNKNOWN_LIMIT, procs))
    else:
        requests = limits = _quantities(node_share(placement, node, gpus_per_node))
    if placement.device == "cuda":
        requests = requests | {GPU_RESOURCE: str(procs)}
        limits = limits | {GPU_RESOURCE: str(procs)}
    return {"requests": requests, "limits": limits}


def node_share(
    placement: Placement, node: NodeResources, gpus_per_node: int | None
) -> NodeResources:
    """The part of a node's job resources `placement`'s processes are entitled to."""
    if placement.device == "cuda" and gpus_per_node:
        slots = gpus_per_node
    else:
        slots = max(1, node.cpu_m // 1000)
    share = min(1.0, placement.procs_per_node / slots)
    return NodeResources(
        cpu_m=max(10, int(share * node.cpu_m) // 10 * 10),
        memory_mib=max(1, int(share * node.memory_mib)),
    )


def _times(per_process: NodeResources, procs: int) -> NodeResources:
    return NodeResources(per_process.cpu_m * procs, per_process.memory_mib * procs)


def _quantities(resources: NodeResources) -> dict[str, str]:
    return {"cpu": f"{resources.cpu_m}m", "memory": f"{resources.memory_mib}Mi"}
