"""What a training node offers a job pod: machine shapes, and what Kubernetes and the cloud keep.

The stack exports `node_job_resources` (contract/stack.py): the CPU and memory one job pod
may request on a training node. The renderer scales it by the processes per node and sets it
as the pod's requests and limits. It is computed here, once per stack, as

    job = capacity - kube_reserved - eviction_threshold - daemons

- capacity: vCPUs and memory of the machine type (tables below, from the providers' machine
  type pages; GCE's and EC2's APIs report memory in MiB, so "GB" there means GiB).
- kube_reserved: what the kubelet, the container runtime and the OS keep, by the cloud's
  published formula. CPU, both clouds: 6% of the first core, 1% of the second, 0.5% of the
  third and fourth, 0.25% of every core above four. Memory on GKE: 25% of the first 4 GiB,
  20% of the next 4, 10% of the next 8, 6% of the next 112, 2% above 128 GiB (255 MiB under
  1 GiB). Memory on EKS (AL2023 nodeadm): 11 MiB per pod the node may run plus 255 MiB;
  max-pods depends on the instance's network interfaces, so the cap nodeadm applies (110
  below 30 vCPUs, 250 from 30) stands in for it: an upper bound of what EKS keeps.
- eviction_threshold: the kubelet's hard memory.available threshold, 100 MiB on both.
- daemons: an allowance for the per-node daemons (kube-proxy, the CNI agent, logging and
  metrics agents, the device plugin, GPU driver installers) and for the GCS FUSE sidecar
  GKE injects into the job pod (250m, 256 MiB): 750m and 1.5 GiB. An allowance, not a
  measurement: a pod that asks for more than the node has free stays Pending and costs a
  run, while a few hundred idle millicores cost little.

A machine type outside these tables has an unknown shape: the stack exports {} and the
renderer falls back to its defaults for unknown nodes (runner/backends/kubernetes/render).
kind nodes are containers sharing this machine, whose size Pulumi does not know: {} too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from contract.stack import NodeResources
from contract.stackconfig.config import StackConfig

MIB_PER_GIB = 1024
EVICTION_THRESHOLD_MIB = 100
DAEMONS = NodeResources(cpu_m=750, memory_mib=1536)
# (size of the tier, share kept): CPU in millicores, memory in MiB; the last tier is open.
CPU_RESERVED_TIERS = ((1000, 0.06), (1000, 0.01), (2000, 0.005), (math.inf, 0.0025))
GKE_MEMORY_RESERVED_TIERS = (
    (4 * MIB_PER_GIB, 0.25),
    (4 * MIB_PER_GIB, 0.20),
    (8 * MIB_PER_GIB, 0.10),
    (112 * MIB_PER_GIB, 0.06),
    (math.inf, 0.02),
)
EKS_MIB_PER_POD, EKS_BASE_MIB = 11, 255


@dataclass(frozen=True)
class MachineShape:
    vcpus: int
    memory_mib: int


# GKE: memory GiB per vCPU of the predefined families whose name ends in the vCPU count.
_GKE_GIB_PER_VCPU = {
    "n1-standard": 3.75, "n1-highmem": 6.5, "n1-highcpu": 0.9,
    "n2-standard": 4, "n2-highmem": 8, "n2-highcpu": 1,
    "n2d-standard": 4, "e2-standard": 4, "e2-highmem": 8, "e2-highcpu": 1,
    "c2-standard": 4, "g2-standard": 4,
}  # fmt: skip
# GKE accelerator-optimized: (vCPUs, GiB) per GPU in the name, or the whole machine.
_GKE_PER_GPU = {"a2-highgpu": (12, 85), "a2-ultragpu": (12, 170)}
_GKE_FIXED = {"a2-megagpu-16g": (96, 1360), "a3-highgpu-8g": (208, 1872),
              "a3-megagpu-8g": (208, 1872)}  # fmt: skip
# EC2: vCPUs per size, for the families below that follow the usual size ladder.
_EC2_SIZE_VCPUS = {"large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16, "8xlarge": 32,
                   "12xlarge": 48, "16xlarge": 64, "24xlarge": 96, "32xlarge": 128,
                   "48xlarge": 192}  # fmt: skip
_EC2_GIB_PER_VCPU = {"m5": 4, "m6i": 4, "m6a": 4, "m7i": 4, "c5": 2, "c6i": 2, "c7i": 2,
                     "r5": 8, "r6i": 8, "g4dn": 4, "g5": 4, "g6": 4}  # fmt: skip
_EC2_FIXED = {
    "g4dn.metal": (96, 384), "p3.2xlarge": (8, 61), "p3.8xlarge": (32, 244),
    "p3.16xlarge": (64, 488), "p3dn.24xlarge": (96, 768), "p4d.24xlarge": (96, 1152),
    "p4de.24xlarge": (96, 1152), "p5.48xlarge": (192, 2048),
}  # fmt: skip


def _shape(vcpus: float, memory_gib: float) -> MachineShape:
    return MachineShape(int(vcpus), round(memory_gib * MIB_PER_GIB))


def gke_shape(machine_type: str) -> MachineShape | None:
    if machine_type in _GKE_FIXED:
        return _shape(*_GKE_FIXED[machine_type])
    family, _, count = machine_type.rpartition("-")
    if family in _GKE_PER_GPU and re.fullmatch(r"\d+g", count):
        vcpus, gib = _GKE_PER_GPU[family]
        return _shape(vcpus * int(count[:-1]), gib * int(count[:-1]))
    if family in _GKE_GIB_PER_VCPU and count.isdigit():
        return _shape(int(count), _GKE_GIB_PER_VCPU[family] * int(count))
    return None


def eks_shape(instance_type: str) -> MachineShape | None:
    if instance_type in _EC2_FIXED:
        return _shape(*_EC2_FIXED[instance_type])
    family, _, size = instance_type.partition(".")
    if family in _EC2_GIB_PER_VCPU and size in _EC2_SIZE_VCPUS:
        vcpus = _EC2_SIZE_VCPUS[size]
        return _shape(vcpus, _EC2_GIB_PER_VCPU[family] * vcpus)
    return None


def _tiered(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    kept, rest = 0.0, amount
    for size, share in tiers:
        step = min(rest, size)
        kept += step * share
        rest -= step
    return kept


def kube_reserved(provider: str, shape: MachineShape) -> NodeResources:
    """What the kubelet, runtime and OS keep, plus the eviction threshold (docstring above)."""
    cpu_m = _tiered(shape.vcpus * 1000, CPU_RESERVED_TIERS)
    memory: float
    if provider == "eks":
        max_pods = 110 if shape.vcpus < 30 else 250
        memory = EKS_MIB_PER_POD * max_pods + EKS_BASE_MIB
    elif shape.memory_mib < MIB_PER_GIB:
        memory = 255
    else:
        memory = _tiered(shape.memory_mib, GKE_MEMORY_RESERVED_TIERS)
    return NodeResources(math.ceil(cpu_m), math.ceil(memory + EVICTION_THRESHOLD_MIB))


def node_job_resources(cfg: StackConfig) -> NodeResources | None:
    """What one job pod may use of a training node, or None when the shape is unknown."""
    shapes = {"gke": gke_shape, "eks": eks_shape}
    shape = shapes[cfg.provider](cfg.node_machine_type) if cfg.provider in shapes else None
    if shape is None:
        return None
    kept = kube_reserved(cfg.provider, shape)
    cpu_m = shape.vcpus * 1000 - kept.cpu_m - DAEMONS.cpu_m
    memory_mib = shape.memory_mib - kept.memory_mib - DAEMONS.memory_mib
    if cpu_m < 100 or memory_mib < 256:
        return None  # too small a machine for the allowance: let the renderer's defaults ask
    return NodeResources(cpu_m // 10 * 10, memory_mib)
