"""The ClusterTrainingRuntime a trainjob stack installs, as a manifest (a pure function).

It is the `torch-distributed` runtime the Kubeflow Trainer 2.3.0 chart installs (the torch ML
policy; one replicated job `node` whose container `node` runs torchrun; the ancestor label
the Trainer looks for), with what a TrainJob cannot ask for itself (its runtime patches cannot
set these, runner/backends/kubernetes/render/trainjob.py): finished JobSets are deleted after
FINISHED_JOB_TTL_S (PyTorchJob's runPolicy has the same TTL), and pods get no service-account
token and no service-link environment. The default image is the stack's training image rather
than a public PyTorch one. The runner's TrainJobs patch in everything else.
"""

from __future__ import annotations

from typing import Any

from contract.stack import FINISHED_JOB_TTL_S, STACK_TRAINING_RUNTIME

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "ClusterTrainingRuntime"
REPLICATED_JOB = "node"  # the name the torch plugin and the runner's patches use
ANCESTOR_LABEL = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def runtime_manifest(image: Any) -> dict[str, Any]:
    """The runtime object; `image` may be a pulumi Output (the pushed image's digest)."""
    pod = {
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [{"name": REPLICATED_JOB, "image": image}],
        }
    }
    job = {"metadata": {"labels": dict(ANCESTOR_LABEL)}, "spec": {"template": pod}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": STACK_TRAINING_RUNTIME,
            "labels": {
                "trainer.kubeflow.org/framework": "torch",
                "app.kubernetes.io/part-of": "stackbench",
            },
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "ttlSecondsAfterFinished": FINISHED_JOB_TTL_S,
                    "replicatedJobs": [{"name": REPLICATED_JOB, "template": job}],
                }
            },
        },
    }
