"""Addons: what a cluster needs in it before the runner can submit a benchmark.

The job operator (Kubeflow Trainer 2.3.x Helm chart with its torch-distributed runtime for
trainjob stacks, or training-operator 1.9.x manifests for pytorchjob stacks), the NVIDIA
device plugin where the cloud does not provide one (eks GPU stacks: GKE ships its own, kind
stacks are CPU-only), the jobs' namespace, the service account jobs run as (bound to the
results store's identity) and its namespace-scoped RBAC. Every object uses the cluster's
explicit Kubernetes provider, every chart a pinned version, and every object is
`deleted_with` the cluster, so destroy removes the cluster without waiting on its contents.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.cluster import ClusterComponent
from infra.config import StackConfig
from infra.outputs import GPU_PRESENT_LABEL, SERVICE_ACCOUNT, gpu_tolerations
from infra.results import ResultsStore

TRAINER_CHART = "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
TRAINER_NAMESPACE = "kubeflow-system"
TRAINING_OPERATOR_MANIFESTS = (
    "https://github.com/kubeflow/trainer/tree/v{version}/manifests/overlays/standalone"
)
DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
HELM_TIMEOUT_S = 600
# What a job's pods may do in their own namespace: discover their peers and read their logs
# and events (rendezvous and progress reporting), nothing cluster-wide and nothing that writes.
JOB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/log", "events"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
]


class Addons(pulumi.ComponentResource):
    """Operators, device plugin, namespace, service account and RBAC in one cluster."""

    def __init__(
        self,
        name: str,
        cfg: StackConfig,
        cluster: ClusterComponent,
        results: ResultsStore,
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
                "name": SERVICE_ACCOUNT,
                "namespace": cfg.namespace,
                "annotations": results.service_account_annotations,
            },
            opts=in_namespace,
        )
        self._rbac(name, in_namespace)
        if cfg.job_api == "trainjob":
            self.operator = self._trainer(name)
        else:
            self.operator = self._training_operator(name)
        self.device_plugin = self._device_plugin(name) if needs_device_plugin(cfg) else None
        self.register_outputs(
            {
                "namespace": cfg.namespace,
                "service_account": SERVICE_ACCOUNT,
                "job_api": cfg.job_api,
                "device_plugin": self.device_plugin is not None,
            }
        )

    def _rbac(self, name: str, opts: pulumi.ResourceOptions) -> None:
        role = k8s.rbac.v1.Role(
            f"{name}-jobs-role",
            metadata={"name": "stackbench-jobs", "namespace": self.cfg.namespace},
            rules=JOB_RULES,
            opts=opts,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-jobs-binding",
            metadata={"name": "stackbench-jobs", "namespace": self.cfg.namespace},
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "stackbench-jobs",
            },
            subjects=[
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": self.cfg.namespace}
            ],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[role])),
        )

    def _trainer(self, name: str) -> k8s.helm.v3.Release:
        namespace = k8s.core.v1.Namespace(
            f"{name}-trainer-ns", metadata={"name": TRAINER_NAMESPACE}, opts=self._k8s
        )
        return k8s.helm.v3.Release(
            f"{name}-trainer",
            name="kubeflow-trainer",
            chart=TRAINER_CHART,
            version=self.cfg.trainer_version,
            namespace=TRAINER_NAMESPACE,
            # The torch-distributed ClusterTrainingRuntime that TrainJobs reference.
            values={"runtimes": {"torchDistributed": {"enabled": True}}},
            atomic=True,
            cleanup_on_fail=True,
            timeout=HELM_TIMEOUT_S,
            opts=pulumi.ResourceOptions.merge(
                self._k8s, pulumi.ResourceOptions(depends_on=[namespace])
            ),
        )

    def _training_operator(self, name: str) -> k8s.kustomize.v2.Directory:
        # training-operator 1.9 ships no Helm chart; its kustomize overlay, pinned by tag, is
        # the upstream install (it creates the `kubeflow` namespace itself).
        return k8s.kustomize.v2.Directory(
            f"{name}-training-operator",
            directory=TRAINING_OPERATOR_MANIFESTS.format(
                version=self.cfg.training_operator_version
            ),
            opts=self._k8s,
        )

    def _device_plugin(self, name: str) -> k8s.helm.v3.Release:
        return k8s.helm.v3.Release(
            f"{name}-device-plugin",
            name="nvidia-device-plugin",
            chart=DEVICE_PLUGIN_CHART,
            version=self.cfg.device_plugin_version,
            repository_opts={"repo": DEVICE_PLUGIN_REPO},
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
