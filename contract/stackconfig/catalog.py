"""Which GPUs each machine type carries, so a stack's GPU settings are checked before any call.

This is data plus two lookups, used by contract/stackconfig/config.py. It is not a price list nor a
complete catalogue of either cloud: it covers the families a benchmark stack uses, and a
machine type outside them is accepted as CPU-only (the cloud rejects a wrong name at `up`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuOffer:
    """What a machine type accepts: the GPU models and, per model, the allowed counts."""

    counts: dict[str, frozenset[int]]
    built_in: bool  # True: the GPUs come with the machine type (a2, a3, g2, every EC2 type)

    def describe(self) -> str:
        return "; ".join(
            f"{gpu} x {', '.join(str(c) for c in sorted(n))}" for gpu, n in self.counts.items()
        )


NO_GPUS = GpuOffer(counts={}, built_in=False)

# GKE: GPUs attachable to N1 machines (https://cloud.google.com/compute/docs/gpus).
_N1_ATTACHABLE = {
    "nvidia-tesla-t4": frozenset({1, 2, 4}),
    "nvidia-tesla-v100": frozenset({1, 2, 4, 8}),
    "nvidia-tesla-p100": frozenset({1, 2, 4}),
    "nvidia-tesla-p4": frozenset({1, 2, 4}),
}
# GKE accelerator-optimized families: the GPU count is in the machine name.
_GKE_FIXED = {
    "a2-highgpu": "nvidia-tesla-a100",
    "a2-megagpu": "nvidia-tesla-a100",
    "a2-ultragpu": "nvidia-a100-80gb",
    "a3-highgpu": "nvidia-h100-80gb",
    "a3-megagpu": "nvidia-h100-mega-80gb",
}
_G2_L4_COUNT = {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}

# EC2: instance family -> GPU model, and size -> count (sizes not listed carry one GPU).
_EC2_GPU = {
    "g4dn": ("nvidia-t4", {"12xlarge": 4, "metal": 8}),
    "g5": ("nvidia-a10g", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
    "g6": ("nvidia-l4", {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
    "p3": ("nvidia-v100", {"8xlarge": 4, "16xlarge": 8}),
    "p3dn": ("nvidia-v100", {"24xlarge": 8}),
    "p4d": ("nvidia-a100", {"24xlarge": 8}),
    "p4de": ("nvidia-a100-80gb", {"24xlarge": 8}),
    "p5": ("nvidia-h100", {"48xlarge": 8}),
}

GKE_MACHINE_RE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9]+(-[a-z0-9]+)*$")
EC2_INSTANCE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")


def gke_offer(machine_type: str) -> GpuOffer:
    """GPUs a GKE node of this machine type can have."""
    for family, gpu in _GKE_FIXED.items():
        match = re.fullmatch(rf"{family}-(\d+)g", machine_type)
        if match:
            return GpuOffer({gpu: frozenset({int(match.group(1))})}, built_in=True)
    match = re.fullmatch(r"g2-standard-(\d+)", machine_type)
    if match and int(match.group(1)) in _G2_L4_COUNT:
        return GpuOffer({"nvidia-l4": frozenset({_G2_L4_COUNT[int(match.group(1))]})}, True)
    if machine_type.startswith("n1-"):
        return GpuOffer(dict(_N1_ATTACHABLE), built_in=False)
    return NO_GPUS


def eks_offer(instance_type: str) -> GpuOffer:
    """GPUs an EC2 instance of this type carries (always built in)."""
    family, _, size = instance_type.partition(".")
    if family not in _EC2_GPU:
        return NO_GPUS
    gpu, counts = _EC2_GPU[family]
    return GpuOffer({gpu: frozenset({counts.get(size, 1)})}, built_in=True)


# The AWS account whose ECR registry holds the EKS add-on images (VPC CNI, kube-proxy,
# CoreDNS) in each region, as the EKS user guide lists them ("View Amazon container image
# registries for Amazon EKS add-ons"). The nodes pull those images with the node role, so it
# may read these registries and, in the stack's own account, the stack's repository alone.
EKS_ADDON_REGISTRY_ACCOUNTS: dict[str, str] = {
    "us-east-1": "602401143452",
    "us-east-2": "602401143452",
    "us-west-1": "602401143452",
    "us-west-2": "602401143452",
    "ca-central-1": "602401143452",
    "sa-east-1": "602401143452",
    "eu-central-1": "602401143452",
    "eu-west-1": "602401143452",
    "eu-west-2": "602401143452",
    "eu-west-3": "602401143452",
    "eu-north-1": "602401143452",
    "ap-south-1": "602401143452",
    "ap-northeast-1": "602401143452",
    "ap-northeast-2": "602401143452",
    "ap-northeast-3": "602401143452",
    "ap-southeast-1": "602401143452",
    "ap-southeast-2": "602401143452",
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
}
