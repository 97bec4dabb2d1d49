"""Addons: what a cluster needs in it before the runner can submit a benchmark.

The job operator (Kubeflow Trainer 2.3.x Helm chart plus the stack's own torch runtime,
infra/runtime.py, for trainjob stacks; training-operator 1.9.x manifests for pytorchjob
stacks), the NVIDIA device plugin where the cloud does not provide one (eks GPU stacks: GKE
ships its own, kind stacks are CPU-only), the jobs' namespace and the service account jobs
run as. Every object uses the cluster's explicit Kubernetes provider, every chart a pinned
version (where each comes from: infra/sources.py), and every object is `deleted_with` the
cluster, so destroy removes the cluster without waiting on its contents.

The jobs' service account is an identity for the results store and nothing else: no Role or
RoleBinding names it and it mounts no API token. What a job needs from the cluster it gets
without the Kubernetes API: its peers' addresses come from the operator (environment
variables, headless-service DNS), results go to a mounted volume (the CSI driver or the
kubelet obtains a token for the account's cloud identity itself; the pod never holds one).
Logs, events and job status are read by the runner with the admin kubeconfig, never by a
pod, so one run cannot read another's logs through this account.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from contract.stack import JOB_CONTROLLERS, JOB_SERVICE_ACCOUNT, STACK_TRAINING_RUNTIME
from contract.stackconfig.config import StackConfig
from infra.cluster import ClusterComponent
from infra.image import TrainingImage
from infra.outputs import GPU_PRESENT_LABEL, gpu_tolerations
from infra.results import ResultsStore
from infra.runtime import runtime_manifest
from infra.sources import DEVICE_PLUGIN, TRAINER, TRAINING_OPERATOR

TRAINER_NAMESPACE = JOB_CONTROLLERS["trainjob"].namespace
# The chart names its controller's Deployment `<release>-controller-manager` when the release is
# named like the chart: contract/stack.py's JOB_CONTROLLERS holds that name, so keep the two.
TRAINER_RELEASE = "kubeflow-trainer"
HELM_TIMEOUT_S = 600


class Addons(pulumi.ComponentResource):
    """Operators, device plugin, namespace and the jobs' service account in one cluster.

    `training_runtime` is the ClusterTrainingRuntime TrainJobs reference ("" on pytorchjob
    stacks); `controller_namespace` what makes the job controller's namespace (the Trainer's
    Namespace, or the training-operator's manifests, which hold theirs)."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        cluster: ClusterComponent,
        results: ResultsStore,
        image: TrainingImage,
        opts=None,
    ):
        super().__init__("stackbench:index:Addons", name, None, opts)
        self.cfg = cfg
        self._k8s = pulumi.ResourceOptions(
            parent=self, provider=cluster.k8s_provider, deleted_with=cluster.cluster_resource
        )
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={"name": cfg.namespace, "labels": {"app.kubernetes.io/part-of": "stackbench"}},
            opts=self._k8s,
        )
        in_namespace = pulumi.ResourceOptions.merge(
            self._k8s, pulumi.ResourceOptions(depends_on=[namespace])
        )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={
                "name": JOB_SERVICE_ACCOUNT,
                "namespace": cfg.namespace,
                "annotations": results.service_account_annotations,
            },
            # No pod of the account gets an API token unless its spec asks (none does).
            automount_service_account_token=False,
            opts=in_namespace,
        )
        self.training_runtime = ""
        self.operator: k8s.helm.v3.Release | k8s.kustomize.v2.Directory
        self.controller_namespace: pulumi.Resource
        if cfg.job_api == "trainjob":
            self.controller_namespace, self.operator = self._trainer(name)
            self._runtime(name, image)
            self.training_runtime = STACK_TRAINING_RUNTIME
        else:
            self.operator = self._training_operator(name)
            self.controller_namespace = self.operator
        self.device_plugin = self._device_plugin(name) if needs_device_plugin(cfg) else None
        self.register_outputs(
            {
                "namespace": cfg.namespace,
                "service_account": JOB_SERVICE_ACCOUNT,
                "job_api": cfg.job_api,
                "training_runtime": self.training_runtime,
                "device_plugin": self.device_plugin is not None,
            }
        )

    def _trainer(self, name: str) -> tuple[k8s.core.v1.Namespace, k8s.helm.v3.Release]:
        namespace = k8s.core.v1.Namespace(
            f"{name}-trainer-ns", metadata={"name": TRAINER_NAMESPACE}, opts=self._k8s
        )
        return namespace, k8s.helm.v3.Release(
            f"{name}-trainer",
            name=TRAINER_RELEASE,
            chart=TRAINER.location,
            version=self.cfg.trainer_version,
            namespace=TRAINER_NAMESPACE,
            # The chart's own torch-distributed runtime is off: the stack installs its own
            # (_runtime), which is that one plus a TTL for finished jobs.
            values={"runtimes": {"torchDistributed": {"enabled": False}}},
            atomic=True,
            cleanup_on_fail=True,
            timeout=HELM_TIMEOUT_S,
            opts=pulumi.ResourceOptions.merge(
                self._k8s, pulumi.ResourceOptions(depends_on=[namespace])
            ),
        )

    def _runtime(self, name: str, image: TrainingImage) -> k8s.apiextensions.CustomResource:
        manifest = runtime_manifest(image.ref)
        return k8s.apiextensions.CustomResource(
            f"{name}-runtime",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            # The chart installs the ClusterTrainingRuntime CRD.
            opts=pulumi.ResourceOptions.merge(
                self._k8s, pulumi.ResourceOptions(depends_on=[self.operator])
            ),
        )

    def _training_operator(self, name: str) -> k8s.kustomize.v2.Directory:
        # training-operator 1.9 ships no Helm chart; its kustomize overlay, pinned by tag, is
        # the upstream install (it creates the `kubeflow` namespace itself). The provider hands
        # the target to kustomize, which clones the repository at the ref (infra/sources.py).
        return k8s.kustomize.v2.Directory(
            f"{name}-training-operator",
            directory=TRAINING_OPERATOR.reference(self.cfg.training_operator_version),
            opts=self._k8s,
        )

    def _device_plugin(self, name: str) -> k8s.helm.v3.Release:
        return k8s.helm.v3.Release(
            f"{name}-device-plugin",
            name="nvidia-device-plugin",
            chart=DEVICE_PLUGIN.chart,
            version=self.cfg.device_plugin_version,
            repository_opts={"repo": DEVICE_PLUGIN.location},
            namespace="kube-system",
            values={
                "nodeSelector": {GPU_PRESENT_LABEL: "true"},
                "tolerations": gpu_tolerations(True),
            },
            atomic=True,
            cleanup_on_fail=True,
            timeout=HELM_TIMEOUT_S,
            opts=self._k8s,
        )


def needs_device_plugin(cfg: StackConfig) -> bool:
    """GKE installs its own device plugin with the driver; EKS' NVIDIA AMI has none."""
    return cfg.has_gpus and cfg.provider == "eks"
