"""GkeCluster: a GKE Standard zonal cluster with a system pool and a training (GPU) pool.

The default pool is removed; the system pool runs operators and DNS; the training pool
carries the guest accelerators with driver installation, autoscales from minNodes (0 by
default, contract/stackconfig/pools.py), optionally on spot VMs, and is tainted so only GPU
jobs land on it.
Nodes run as a service account of their own that writes logs and metrics and reads only the
stack's own image repository (infra/image.py grants that on the repository, not the project).
Workload Identity is on (results.py binds the job service account) and so is the Cloud
Storage FUSE CSI driver, through which job pods write the results bucket. Deletion
protection follows the deletionProtection setting (on by default: turn it off, `pulumi up`,
then destroy); the API is reachable only from apiAllowedCidrs. GKE provides the NVIDIA device
plugin itself, so addons.py installs none here. Pod bandwidth annotations are not known to be
enforced by GKE's pod network (neither its legacy dataplane's CNI config nor Dataplane V2 is
documented to chain the bandwidth plugin), so the stack says it does not shape bandwidth.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from contract.stackconfig.config import StackConfig, gke_account_id
from contract.stackconfig.pools import training_pool
from infra.cluster import ClusterComponent, exec_kubeconfig

# Project-wide roles of the nodes' account: logs and metrics only. Image pulls are granted on
# the stack's own repository (infra/image.py), never on every repository of the project.
NODE_SA_ROLES = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
)
GKE_AUTH_PLUGIN = {
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "command": "gke-gcloud-auth-plugin",
    "provideClusterInfo": True,
    "installHint": "gcloud components install gke-gcloud-auth-plugin",
}


class GkeCluster(ClusterComponent):
    cluster_resource: gcp.container.Cluster
    cloud_provider: gcp.Provider
    node_service_account: gcp.serviceaccount.Account
    """A GKE cluster; fills the ClusterComponent contract plus project, workload pool and the
    nodes' service account (the identity that pulls the training image)."""

    def __init__(self, name: str, cfg: StackConfig, opts=None) -> None:
        super().__init__("stackbench:index:GkeCluster", name, cfg, opts)
        self.bandwidth_shaping = False
        self.cloud_provider = gcp.Provider(
            f"{name}-gcp",
            project=cfg.gcp_project or None,
            region=cfg.region,
            zone=cfg.zone,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self._opts = pulumi.ResourceOptions(parent=self, provider=self.cloud_provider)
        if cfg.gcp_project:
            self.project: pulumi.Input[str] = cfg.gcp_project
        else:
            client = gcp.organizations.get_client_config_output(
                opts=pulumi.InvokeOutputOptions(provider=self.cloud_provider)
            )
            self.project = client.project
        self.workload_pool = pulumi.Output.concat(self.project, ".svc.id.goog")
        network, subnet = self._network(name)
        self.cluster_resource = self._cluster(name, network, subnet)
        self.node_service_account = node_sa = self._node_service_account(name)
        self.system_pool = self._system_pool(name, node_sa)
        self.training_pool = self._training_pool(name, node_sa)
        cluster = self.cluster_resource
        kubeconfig = pulumi.Output.all(
            cluster.name, cluster.endpoint, cluster.master_auth.cluster_ca_certificate
        ).apply(lambda v: exec_kubeconfig(v[0], f"https://{v[1]}", v[2], GKE_AUTH_PLUGIN))
        self._make_k8s_provider(kubeconfig)
        self._finish(project=self.project, workload_pool=self.workload_pool)

    def _network(self, name: str) -> tuple[gcp.compute.Network, gcp.compute.Subnetwork]:
        # A network of its own, so the stack owns (and destroy removes) everything it uses.
        network = gcp.compute.Network(f"{name}-net", auto_create_subnetworks=False, opts=self._opts)
        subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            network=network.id,
            region=self.cfg.region,
            ip_cidr_range="10.10.0.0/20",
            private_ip_google_access=True,
            secondary_ip_ranges=[
                {"range_name": "pods", "ip_cidr_range": "10.20.0.0/14"},
                {"range_name": "services", "ip_cidr_range": "10.24.0.0/20"},
            ],
            opts=self._opts,
        )
        return network, subnet

    def _cluster(self, name: str, network, subnet) -> gcp.container.Cluster:
        cfg = self.cfg
        return gcp.container.Cluster(
            f"{name}-cluster",
            location=cfg.zone,
            network=network.id,
            subnetwork=subnet.id,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy={
                "cluster_secondary_range_name": "pods",
                "services_secondary_range_name": "services",
            },
            # GKE requires a first pool; it is removed as soon as the cluster exists.
            remove_default_node_pool=True,
            initial_node_count=1,
            min_master_version=cfg.kubernetes_version,
            release_channel={"channel": "REGULAR"},
            deletion_protection=cfg.deletion_protection,
            # Job pods mount the results bucket through it (render/common.py).
            addons_config={"gcs_fuse_csi_driver_config": {"enabled": True}},
            workload_identity_config={"workload_pool": self.workload_pool},
            master_authorized_networks_config={
                "cidr_blocks": [
                    {"cidr_block": cidr, "display_name": f"allowed-{i}"}
                    for i, cidr in enumerate(cfg.api_allowed_cidrs)
                ],
                "gcp_public_cidrs_access_enabled": False,
            },
            opts=self._opts,
        )

    def _node_service_account(self, name: str) -> gcp.serviceaccount.Account:
        # Nodes get a minimal account instead of the default compute one (project Editor).
        account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=gke_account_id(self.cfg.stack, "-nodes"),
            display_name=f"stackbench {self.cfg.stack} GKE nodes",
            opts=self._opts,
        )
        for role in NODE_SA_ROLES:
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[1]}",
                project=self.project,
                role=role,
                member=account.email.apply(lambda email: f"serviceAccount:{email}"),
                opts=self._opts,
            )
        return account

    def _node_config(self, machine_type: str, node_sa) -> gcp.container.NodePoolNodeConfigArgsDict:
        return {
            "machine_type": machine_type,
            "service_account": node_sa.email,
            "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            "workload_metadata_config": {"mode": "GKE_METADATA"},
            "shielded_instance_config": {"enable_secure_boot": True},
        }

    def _system_pool(self, name: str, node_sa) -> gcp.container.NodePool:
        return gcp.container.NodePool(
            f"{name}-system",
            cluster=self.cluster_resource.name,
            location=self.cfg.zone,
            node_count=self.cfg.system_node_count,
            node_config=self._node_config(self.cfg.system_machine_type, node_sa),
            management={"auto_repair": True, "auto_upgrade": True},
            opts=self._opts,
        )

    def _training_pool(self, name: str, node_sa) -> gcp.container.NodePool:
        cfg, size = self.cfg, training_pool(self.cfg)
        node_config = self._node_config(cfg.node_machine_type, node_sa)
        node_config |= {
            "spot": cfg.spot,
            "labels": self.pool_labels(),
            # Rebuilt as literals so that each is checked as the provider's taint record.
            "taints": [
                {"key": t["key"], "value": t["value"], "effect": t["effect"]}
                for t in self.gpu_taints("NO_SCHEDULE")
            ],
        }
        if cfg.has_gpus:
            node_config["guest_accelerators"] = [
                {
                    "type": cfg.gpu_type,
                    "count": cfg.gpus_per_node,
                    "gpu_driver_installation_config": {
                        "gpu_driver_version": cfg.gpu_driver_version
                    },
                }
            ]
        return gcp.container.NodePool(
            f"{name}-training",
            cluster=self.cluster_resource.name,
            location=cfg.zone,
            initial_node_count=size.initial_nodes,
            autoscaling={"min_node_count": size.min_nodes, "max_node_count": size.max_nodes},
            node_config=node_config,
            management={"auto_repair": True, "auto_upgrade": True},
            opts=self._opts,
        )


def gke_cluster(cluster: ClusterComponent) -> GkeCluster:
    """`cluster` as the GKE cluster it is where a stack's provider is gke (its nodes' account
    is GKE's alone); another kind is a bug in the caller."""
    if not isinstance(cluster, GkeCluster):
        raise TypeError(f"expected a GkeCluster, got a {type(cluster).__name__}")
    return cluster
