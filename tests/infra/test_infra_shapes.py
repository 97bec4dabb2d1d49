"""Machine shapes and what a job pod may use of a node (infra/shapes.py), against figures
worked out by hand from the providers' published formulas."""

from __future__ import annotations

import pytest
from infra_harness import REPO

from contract.stack import NodeResources
from contract.stackconfig import stackfiles
from contract.stackconfig.config import parse_stack_config
from infra.shapes import DAEMONS, MachineShape, eks_shape, gke_shape, kube_reserved
from infra.shapes import node_job_resources as job_resources


@pytest.mark.parametrize(
    ("machine", "shape"),
    [
        ("n1-standard-8", MachineShape(8, 30720)),  # 3.75 GiB per vCPU
        ("n1-standard-4", MachineShape(4, 15360)),
        ("e2-standard-4", MachineShape(4, 16384)),
        ("g2-standard-24", MachineShape(24, 98304)),
        ("a2-highgpu-8g", MachineShape(96, 696320)),  # 12 vCPU and 85 GiB per A100
        ("a3-highgpu-8g", MachineShape(208, 1916928)),
        ("n1-superfast-8", None),
        ("a2-highgpu-g", None),
    ],
)
def test_gke_machine_shapes(machine, shape):
    assert gke_shape(machine) == shape


@pytest.mark.parametrize(
    ("instance", "shape"),
    [
        ("g4dn.xlarge", MachineShape(4, 16384)),
        ("g5.48xlarge", MachineShape(192, 786432)),
        ("m6i.large", MachineShape(2, 8192)),
        ("p4d.24xlarge", MachineShape(96, 1179648)),
        ("p3.2xlarge", MachineShape(8, 62464)),
        ("g4dn.huge", None),
        ("x9.xlarge", None),
    ],
)
def test_eks_instance_shapes(instance, shape):
    assert eks_shape(instance) == shape


def test_gke_reservation_follows_the_tiers():
    # CPU 6% + 1% + 2 x 0.5% of the first four cores = 80m; memory 25% of 4 GiB + 20% of
    # 4 GiB + 10% of 7 GiB = 2560 MiB, plus the 100 MiB eviction threshold.
    assert kube_reserved("gke", MachineShape(4, 15360)) == NodeResources(80, 2660)
    # Above 128 GiB only 2% more: 96 cores keep 80m + 0.25% x 92 cores = 310m.
    big = kube_reserved("gke", MachineShape(96, 696320))
    assert big == NodeResources(310, 20949)


def test_eks_reservation_is_per_pod_at_nodeadms_max_pods_cap():
    assert kube_reserved("eks", MachineShape(4, 16384)) == NodeResources(80, 11 * 110 + 255 + 100)
    assert kube_reserved("eks", MachineShape(96, 1179648)).memory_mib == 11 * 250 + 255 + 100


def test_job_resources_are_what_is_left_after_reservation_and_daemons():
    cfg = stackfiles.load(REPO, "eks-gpu-8")  # g4dn.xlarge
    assert job_resources(cfg) == NodeResources(
        cpu_m=4000 - 80 - DAEMONS.cpu_m, memory_mib=16384 - 1565 - DAEMONS.memory_mib
    )


def test_kind_and_unknown_machines_have_no_shape():
    assert job_resources(stackfiles.load(REPO, "kind")) is None
    gke = stackfiles.load(REPO, "gke-cpu-16")
    assert job_resources(gke) is not None
    unknown = parse_stack_config(
        {**stackfiles.cli_values(REPO, "gke-cpu-16"), "nodeMachineType": "n4-custom-6"},
        "x",
        str(REPO),
    )
    assert job_resources(unknown) is None
