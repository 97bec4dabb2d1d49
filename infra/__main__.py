"""The Pulumi program (`main: infra/` in Pulumi.yaml): composition only.

Validate the stack's settings, make the cluster of the configured kind, the training image,
the results store and the add-ons, and export the outputs the runner reads. All logic lives
in the modules imported below.
"""

import sys
from pathlib import Path

# Pulumi runs this directory as a script, so `infra` is not importable as a package unless
# the project root is on the path (the same path the tests import from).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.addons import Addons
from infra.config import load_stack_config
from infra.eks import EksCluster
from infra.gke import GkeCluster
from infra.image import TrainingImage
from infra.kind import KindCluster
from infra.outputs import (
    RESULTS_MOUNT_PATH,
    SERVICE_ACCOUNT,
    TRAINING_RUNTIME,
    StackOutputs,
)
from infra.results import ResultsStore

CLUSTERS = {"kind": KindCluster, "gke": GkeCluster, "eks": EksCluster}

cfg = load_stack_config()  # raises before any resource exists
cluster = CLUSTERS[cfg.provider](cfg.stack, cfg)
image = TrainingImage(f"{cfg.stack}-image", cfg, cluster)
results = ResultsStore(f"{cfg.stack}-results", cfg, cluster)
Addons(f"{cfg.stack}-addons", cfg, cluster, results)

StackOutputs(
    kubeconfig=cluster.kubeconfig,
    provider=cfg.provider,
    namespace=cfg.namespace,
    job_api=cfg.job_api,
    image=image.ref,
    node_selector=cluster.node_selector,
    gpu_tolerations=cluster.gpu_tolerations,
    gpus_per_node=cluster.gpus_per_node,
    num_nodes=cluster.num_nodes,
    results_store=results.uri,
    results_mount_path=RESULTS_MOUNT_PATH,
    service_account=SERVICE_ACCOUNT,
    training_runtime=TRAINING_RUNTIME if cfg.job_api == "trainjob" else "",
).export()
