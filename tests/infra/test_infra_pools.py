"""The one pool-sizing rule (contract/stackconfig/pools.py) the program and `runner cost` share."""

from __future__ import annotations

import pytest
from infra_harness import REPO

from contract.stackconfig import stackfiles
from contract.stackconfig.pools import PoolSize, system_pool, training_pool


def test_gke_training_pool_autoscales_from_its_floor():
    size = training_pool(stackfiles.load(REPO, "gke-gpu-8"))
    assert size == PoolSize(min_nodes=0, max_nodes=8, initial_nodes=0)
    assert size.autoscaled and size.describe() == "autoscaled 0-8"


def test_eks_training_group_is_fixed_at_max_nodes_whatever_min_nodes_says():
    cfg = stackfiles.load(REPO, "eks-gpu-8")
    assert training_pool(cfg) == PoolSize(8, 8, 8)
    assert not training_pool(cfg).autoscaled and training_pool(cfg).describe() == "fixed at 8"


def test_kind_workers_are_fixed_and_kind_has_no_system_pool():
    cfg = stackfiles.load(REPO, "kind")
    assert training_pool(cfg) == PoolSize(2, 2, 2)
    assert system_pool(cfg) == PoolSize(0, 0, 0)


def test_system_pool_is_fixed_at_its_count():
    assert system_pool(stackfiles.load(REPO, "gke-cpu-16")) == PoolSize(1, 1, 1)


@pytest.mark.parametrize(("lo", "initial", "hi"), [(2, 1, 4), (0, 5, 4), (-1, 0, 0)])
def test_pool_sizes_out_of_order_are_a_bug(lo, initial, hi):
    with pytest.raises(ValueError):
        PoolSize(lo, hi, initial)
