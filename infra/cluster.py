"""The output contract every cluster component fills, whatever the cloud.

KindCluster, GkeCluster and EksCluster subclass ClusterComponent and set the same attributes,
so that the rest of the program (image, results store, add-ons, stack outputs) never asks
which kind of cluster it has, except where identity differs (results.py). Not a resource of
its own: a base class and a kubeconfig helper.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract.stackconfig.config import StackConfig
from contract.stackconfig.pools import training_pool
from infra.outputs import (
    GPU_PRESENT_LABEL,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    TRAIN_POOL_LABEL,
    gpu_tolerations,
)


class ClusterComponent(pulumi.ComponentResource):
    """Base of the cluster components; subclasses create resources, then call _finish.

    Attributes every subclass sets:
      kubeconfig           Output[str], secret: admin access for the runner
      k8s_provider         the explicit Kubernetes provider every in-cluster object uses
      cluster_resource     the resource whose deletion takes the in-cluster objects with it
      cloud_provider       the explicit gcp/aws provider (None on kind)
      bandwidth_shaping    whether the pod network enforces the kubernetes.io/ingress- and
                           egress-bandwidth annotations (the CNI chains the bandwidth plugin)
    """

    kubeconfig: pulumi.Output[str]
    k8s_provider: k8s.Provider
    cluster_resource: pulumi.Resource
    cloud_provider: pulumi.ProviderResource | None
    bandwidth_shaping: bool

    def __init__(self, type_name: str, name: str, cfg: StackConfig, opts=None) -> None:
        super().__init__(type_name, name, None, opts)
        self.cfg = cfg
        self.provider_name = cfg.provider
        self.gpus_per_node = cfg.gpus_per_node
        self.num_nodes = training_pool(cfg).max_nodes
        gpu = {GPU_PRESENT_LABEL: "true"} if cfg.has_gpus else {}
        pool = {TRAIN_POOL_LABEL: "train"} if cfg.provider != "kind" else {}
        self.node_selector = gpu | pool
        self.gpu_tolerations = gpu_tolerations(cfg.has_gpus)

    def pool_labels(self) -> dict[str, str]:
        """Labels of the training pool: exactly what the exported node selector asks for."""
        return dict(self.node_selector)

    def gpu_taints(self, effect: str) -> list[dict[str, str]]:
        """The training pool's taints in the cloud API's spelling of the effect."""
        if not self.cfg.has_gpus:
            return []
        return [{"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": effect}]

    def _make_k8s_provider(self, kubeconfig: pulumi.Output[str]) -> None:
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        # delete_unreachable: once the cluster is gone, destroy drops its objects from the
        # state instead of waiting on an API server that no longer answers.
        self.k8s_provider = k8s.Provider(
            f"{self.cfg.stack}-k8s",
            kubeconfig=self.kubeconfig,
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _finish(self, **extra: Any) -> None:
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "provider": self.provider_name,
                "node_selector": self.node_selector,
                "gpu_tolerations": self.gpu_tolerations,
                "gpus_per_node": self.gpus_per_node,
                "num_nodes": self.num_nodes,
                "bandwidth_shaping": self.bandwidth_shaping,
                **extra,
            }
        )


def exec_kubeconfig(name: str, server: str, ca_data: str, user_exec: dict[str, Any]) -> str:
    """A one-context kubeconfig whose user authenticates by running a credential plugin."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [{"name": name, "user": {"exec": user_exec}}],
    }
    return json.dumps(config, indent=2)
