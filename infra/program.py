"""The Pulumi program: composition only (the project root's __main__.py calls `main`).

Validate the stack's settings, make the cluster of the configured kind, the training image,
the results store, the add-ons and the runner's identity, and export the outputs
contract/stack.py declares. All logic lives in the modules imported below.
"""

from __future__ import annotations

import dataclasses

from contract.stack import JOB_SERVICE_ACCOUNT, RESULTS_MOUNT_PATH
from infra.addons import Addons
from infra.eks import EksCluster
from infra.gke import GkeCluster
from infra.image import TrainingImage
from infra.kind import KindCluster
from infra.outputs import export_outputs
from infra.rbac import RunnerIdentity
from infra.results import ResultsStore
from infra.settings import load_stack_config
from infra.shapes import node_job_resources

CLUSTERS = {"kind": KindCluster, "gke": GkeCluster, "eks": EksCluster}


def main() -> None:
    cfg = load_stack_config()  # raises before any resource exists
    cluster = CLUSTERS[cfg.provider](cfg.stack, cfg)
    image = TrainingImage(f"{cfg.stack}-image", cfg, cluster)
    results = ResultsStore(f"{cfg.stack}-results", cfg, cluster)
    addons = Addons(f"{cfg.stack}-addons", cfg, cluster, results, image)
    runner = RunnerIdentity(f"{cfg.stack}-runner", cfg, cluster, after=addons,
                            controller_after=addons.controller_namespace)  # fmt: skip
    job_resources = node_job_resources(cfg)
    export_outputs(
        {
            "kubeconfig": cluster.kubeconfig,
            "runner_kubeconfig": runner.kubeconfig,
            "provider": cfg.provider,
            "namespace": cfg.namespace,
            "job_api": cfg.job_api,
            "image": image.ref,
            "image_plugins": image.plugins,
            "node_selector": cluster.node_selector,
            "gpu_tolerations": cluster.gpu_tolerations,
            "gpus_per_node": cluster.gpus_per_node,
            "num_nodes": cluster.num_nodes,
            "node_job_resources": dataclasses.asdict(job_resources) if job_resources else {},
            "results_store": results.uri,
            "results_mount_path": RESULTS_MOUNT_PATH,
            "service_account": JOB_SERVICE_ACCOUNT,
            "training_runtime": addons.training_runtime,
            "bandwidth_shaping": cluster.bandwidth_shaping,
        }
    )
