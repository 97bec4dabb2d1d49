"""How many nodes each pool of a stack has: the one sizing rule for the program and the prices.

infra/gke.py, infra/eks.py and infra/kind.py size their pools with these functions, and
`runner cost` prices what they return, so the cost of a stack is the cost of what it runs:

- gke: the training pool autoscales between minNodes and maxNodes (GKE's cluster autoscaler
  is part of the node pool), starting at minNodes; an idle pool sits at its floor.
- eks: no cluster autoscaler is installed, so the training node group is fixed at maxNodes
  (min = desired = max): the nodes a job asks for are there when it is submitted, and they
  are paid for from `pulumi up` to `pulumi destroy`, jobs or not.
- kind: maxNodes worker containers, fixed.
- the system pool (gke, eks) is fixed at systemNodeCount.

Pure functions of StackConfig; nothing here creates resources.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.stackconfig.config import StackConfig


@dataclass(frozen=True)
class PoolSize:
    """A pool's node counts: fixed when min_nodes == max_nodes, else autoscaled between."""

    min_nodes: int  # the floor: what an idle pool keeps (and costs)
    max_nodes: int
    initial_nodes: int  # right after `pulumi up`

    def __post_init__(self) -> None:
        if not 0 <= self.min_nodes <= self.initial_nodes <= self.max_nodes:
            raise ValueError(f"pool sizes must satisfy min <= initial <= max, got {self}")

    @property
    def autoscaled(self) -> bool:
        return self.min_nodes != self.max_nodes

    def describe(self) -> str:
        if self.autoscaled:
            return f"autoscaled {self.min_nodes}-{self.max_nodes}"
        return f"fixed at {self.max_nodes}"


def training_pool(cfg: StackConfig) -> PoolSize:
    """The pool jobs run on; see the module docstring for the rule per provider."""
    if cfg.provider == "gke":
        return PoolSize(cfg.min_nodes, cfg.max_nodes, cfg.min_nodes)
    return PoolSize(cfg.max_nodes, cfg.max_nodes, cfg.max_nodes)


def system_pool(cfg: StackConfig) -> PoolSize:
    """Operators, DNS and the device plugin's controller; kind has none (its control plane
    container does this work, on this machine)."""
    count = 0 if cfg.provider == "kind" else cfg.system_node_count
    return PoolSize(count, count, count)
