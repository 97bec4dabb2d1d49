"""EksCluster: an EKS cluster (pulumi-eks) with a system node group and a training node group.

Both node groups are EKS managed node groups sharing one node role. The training group runs
the EKS-optimized AL2023 NVIDIA AMI when the stack has GPUs (drivers and container toolkit
included; addons.py installs the device plugin, which that AMI lacks), is tainted
nvidia.com/gpu and labelled nvidia.com/gpu.present=true, and may run on spot capacity. An
IAM OIDC provider is created for IRSA (results.py binds the job service account). The API
endpoint answers only apiAllowedCidrs from outside (nodes reach it privately), and deletion
protection follows the deletionProtection setting. Every node group's launch template requires
IMDSv2 with a hop limit of 1, so pods cannot reach the node role's credentials through the
instance metadata service (jobs use IRSA). The node role pulls images from the stack's own
ECR repository (infra/image.py grants it) and the region's EKS add-on registry, and from no
other repository of the account. The VPC CNI chains the bandwidth plugin, so pods'
kubernetes.io/{ingress,egress}-bandwidth annotations are enforced. It uses the
account's default VPC: a dedicated VPC is not built here. The training group is fixed at
maxNodes (no cluster autoscaler; contract/stackconfig/pools.py).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from contract.stackconfig.catalog import EKS_ADDON_REGISTRY_ACCOUNTS
from contract.stackconfig.config import StackConfig
from contract.stackconfig.pools import PoolSize, system_pool, training_pool
from infra.cluster import ClusterComponent

# No ECR managed policy (AmazonEC2ContainerRegistryReadOnly, ...PullOnly): those read every
# repository of the account, so a node, or a pod that reached its credentials, could pull
# any other team's images. The nodes pull from two places only (node_pull_policy below).
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy")
# What the kubelet's ECR credential provider and containerd need to pull an image.
ECR_PULL_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
]
GPU_AMI = "AL2023_x86_64_NVIDIA"
CPU_AMI = "AL2023_x86_64_STANDARD"
NODE_DISK_GB = 200
# The root volume of the AL2023 EKS AMIs (CPU and NVIDIA alike).
ROOT_DEVICE = "/dev/xvda"
# IMDSv2 only, and its token answers travel one hop: the node itself (kubelet, and
# host-network pods such as aws-node) reaches the metadata service, a pod behind its own
# network namespace (one hop further) does not, so no job can take the node role's
# credentials. AL2023's default hop limit is 2, and pulumi-eks' enableIMDSv2 also sets 2,
# which lets every pod in.
NODE_METADATA_OPTIONS = {
    "http_endpoint": "enabled",
    "http_tokens": "required",
    "http_put_response_hop_limit": 1,
}


class EksCluster(ClusterComponent):
    cluster_resource: eks.Cluster
    cloud_provider: aws.Provider
    node_role: aws.iam.Role
    """An EKS cluster; fills the ClusterComponent contract plus the OIDC provider."""

    def __init__(self, name: str, cfg: StackConfig, opts=None) -> None:
        super().__init__("stackbench:index:EksCluster", name, cfg, opts)
        self.bandwidth_shaping = True
        self.cloud_provider = aws.Provider(
            f"{name}-aws", region=cfg.region, opts=pulumi.ResourceOptions(parent=self)
        )
        self._opts = pulumi.ResourceOptions(parent=self, provider=self.cloud_provider)
        node_role, node_policies = self._node_role(name, cfg.region)
        self.node_role = node_role
        self.cluster_resource = eks.Cluster(
            f"{name}-cluster",
            version=cfg.kubernetes_version,
            skip_default_node_group=True,
            instance_roles=[node_role],
            create_oidc_provider=True,
            endpoint_public_access=True,
            endpoint_private_access=True,
            public_access_cidrs=list(cfg.api_allowed_cidrs),
            deletion_protection=cfg.deletion_protection,
            # The bandwidth CNI plugin after aws-cni: pods' bandwidth annotations are enforced.
            vpc_cni_options={"configuration_values": {"env": {"ENABLE_BANDWIDTH_PLUGIN": "true"}}},
            opts=pulumi.ResourceOptions(parent=self, providers={"aws": self.cloud_provider}),
        )
        self.system_group = self._node_group(
            f"{name}-system",
            node_role,
            instance_type=cfg.system_machine_type,
            ami_type=CPU_AMI,
            size=system_pool(cfg),
            spot=False,
            labels={},
            taints=[],
            needs=node_policies,
        )
        self.training_group = self._node_group(
            f"{name}-training",
            node_role,
            instance_type=cfg.node_machine_type,
            ami_type=GPU_AMI if cfg.has_gpus else CPU_AMI,
            size=training_pool(cfg),
            spot=cfg.spot,
            labels=self.pool_labels(),
            taints=self.gpu_taints("NO_SCHEDULE"),
            needs=node_policies,
        )
        self.oidc_provider_arn = self.cluster_resource.oidc_provider_arn
        self.oidc_provider_url = self.cluster_resource.oidc_provider_url
        self._make_k8s_provider(self.cluster_resource.kubeconfig_json)
        self._finish(
            oidc_provider_arn=self.oidc_provider_arn, oidc_provider_url=self.oidc_provider_url
        )

    def _node_role(self, name: str, region: str) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
        """The nodes' role and its policies; a node group waits for the policies, so its
        first nodes can join and pull their network plugin."""
        role = aws.iam.Role(
            f"{name}-nodes",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            opts=self._opts,
        )
        policies: list[pulumi.Resource] = [
            aws.iam.RolePolicyAttachment(
                f"{name}-nodes-{policy}",
                role=role.name,
                policy_arn=f"arn:{aws_partition(region)}:iam::aws:policy/{policy}",
                opts=self._opts,
            )
            for policy in NODE_POLICIES
        ]
        # The stack's repository is added by infra/image.py, which makes it.
        policies.append(
            aws.iam.RolePolicy(
                f"{name}-nodes-addon-images",
                role=role.id,
                policy=node_pull_policy(addon_registry_arn(region)),
                opts=self._opts,
            )
        )
        return role, policies

    def _node_group(
        self,
        name,
        node_role,
        *,
        instance_type,
        ami_type,
        size: PoolSize,
        spot,
        labels,
        taints,
        needs: list[pulumi.Resource],
    ) -> eks.ManagedNodeGroup:
        template = self._launch_template(name)
        return eks.ManagedNodeGroup(
            name,
            cluster=self.cluster_resource,
            node_role=node_role,
            instance_types=[instance_type],
            ami_type=ami_type,
            capacity_type="SPOT" if spot else "ON_DEMAND",
            scaling_config={
                "min_size": size.min_nodes,
                "max_size": size.max_nodes,
                "desired_size": size.initial_nodes,
            },
            # The disk size lives in the launch template: EKS refuses both.
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            labels=labels,
            taints=taints,
            opts=pulumi.ResourceOptions(
                parent=self, providers={"aws": self.cloud_provider}, depends_on=needs
            ),
        )

    def _launch_template(self, name: str) -> aws.ec2.LaunchTemplate:
        # No image or user data: EKS still picks the AMI (ami_type) and bootstraps the node;
        # the template adds only the metadata rule and the root disk.
        return aws.ec2.LaunchTemplate(
            f"{name}-lt",
            metadata_options=NODE_METADATA_OPTIONS,
            block_device_mappings=[
                {
                    "device_name": ROOT_DEVICE,
                    "ebs": {"volume_size": NODE_DISK_GB, "volume_type": "gp3"},
                }
            ],
            opts=self._opts,
        )


def aws_partition(region: str) -> str:
    """The ARN partition of an AWS region (China and GovCloud have their own)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def addon_registry_arn(region: str) -> str:
    """Every repository of the region's EKS add-on registry (VPC CNI, kube-proxy, CoreDNS):
    another account's, which shares only those images."""
    account = EKS_ADDON_REGISTRY_ACCOUNTS[region]  # config.py refuses an unlisted region
    return f"arn:{aws_partition(region)}:ecr:{region}:{account}:repository/*"


def node_pull_policy(*repository_arns: str) -> str:
    """An inline policy letting the nodes pull from these repositories and nothing else.
    GetAuthorizationToken names no repository (IAM takes only "*" for it): the token it
    returns opens only what the pull actions allow."""
    statements = [
        {"Effect": "Allow", "Action": ["ecr:GetAuthorizationToken"], "Resource": "*"},
        {"Effect": "Allow", "Action": ECR_PULL_ACTIONS, "Resource": list(repository_arns)},
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def eks_cluster(cluster: ClusterComponent) -> EksCluster:
    """`cluster` as the EKS cluster it is where a stack's provider is eks (its node role is
    EKS's alone); another kind is a bug in the caller."""
    if not isinstance(cluster, EksCluster):
        raise TypeError(f"expected an EksCluster, got a {type(cluster).__name__}")
    return cluster
