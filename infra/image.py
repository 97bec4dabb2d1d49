"""TrainingImage: the registry for the stack and the training image built from images/.

The registry is Artifact Registry on gke (the nodes' account may read this repository and no
other), ECR on eks (force delete, so destroy removes pushed images; the node role may pull
from this repository and no other of the account), and kind's local
registry container on kind. The image is built by BuildKit
(pulumi-docker-build) with the CUDA or CPU variant chosen by the stack's GPUs, pushed, and
exported as `repo@sha256:...`: a digest, never a tag, so every job of the stack runs the same
bytes. It carries the stack's plugins (config `plugins`, infra/image_plugins.py), listed in
the image (/opt/stackbench/plugins/plugins.json), its label and the `image_plugins` output.
Building needs Docker on the machine running `pulumi up`; previews do not build.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_docker_build as docker_build
import pulumi_gcp as gcp

from contract.imageplugins import LABEL
from contract.stack import IMAGE_HOME, IMAGE_UID
from contract.stackconfig.config import StackConfig
from infra.cluster import ClusterComponent
from infra.eks import eks_cluster, node_pull_policy
from infra.gke import gke_cluster
from infra.image_plugins import stage
from infra.kind import kind_cluster
from infra.settings import PROJECT_ROOT

IMAGE_NAME = "stackbench-train"
NODE_PULL_ROLE = "roles/artifactregistry.reader"
DOCKERFILE = PROJECT_ROOT / "images" / "Dockerfile"
# Where the stack's plugins are staged for the build (build/ is ignored by git).
PLUGIN_STAGING = PROJECT_ROOT / "build" / "image-plugins"


class TrainingImage(pulumi.ComponentResource):
    """Registry plus pushed image; `ref` is the digest-pinned reference jobs use."""

    def __init__(self, name: str, cfg: StackConfig, cluster: ClusterComponent, opts=None):
        super().__init__("stackbench:index:TrainingImage", name, None, opts)
        self._opts = pulumi.ResourceOptions(parent=self, provider=cluster.cloud_provider)
        if cfg.provider == "gke":
            repository, registries = self._artifact_registry(name, cfg, cluster)
        elif cfg.provider == "eks":
            repository, registries = self._ecr(name, cfg, cluster)
        else:
            repository, registries = f"{kind_cluster(cluster).registry_address}/{IMAGE_NAME}", []
        # On kind the push needs the registry container up; clouds' repos are inputs already.
        needs = [kind_cluster(cluster).registry] if cfg.provider == "kind" else []
        self.repository = pulumi.Output.from_input(repository)
        # The plugins it carries (stack config `plugins`): their folders and list, staged.
        staging = PLUGIN_STAGING / cfg.stack
        plugins = stage(cfg.plugins, PROJECT_ROOT, staging)
        self.plugins = [p.to_dict() for p in plugins]
        self.image = docker_build.Image(
            f"{name}-build",
            context={
                "location": str(PROJECT_ROOT),
                "named": {"plugins": {"location": str(staging)}},
            },
            labels={LABEL: json.dumps(self.plugins, separators=(",", ":"))},
            dockerfile={"location": str(DOCKERFILE)},
            build_args=build_args(cfg),
            platforms=[docker_build.Platform.LINUX_AMD64],
            # A stack-named tag keeps the registry readable; jobs use the digest below.
            tags=[pulumi.Output.concat(self.repository, ":", cfg.stack)],
            push=True,
            registries=registries,
            opts=pulumi.ResourceOptions(parent=self, depends_on=needs),
        )
        self.ref = pulumi.Output.concat(self.repository, "@", self.image.digest)
        self.register_outputs({"repository": self.repository, "ref": self.ref})

    def _artifact_registry(self, name: str, cfg: StackConfig, cluster: ClusterComponent):
        repo = gcp.artifactregistry.Repository(
            f"{name}-repo",
            repository_id=f"stackbench-{cfg.stack}",
            location=cfg.region,
            format="DOCKER",
            description=f"stackbench training images for stack {cfg.stack}",
            opts=self._opts,
        )
        # The nodes pull the training image with their own account; reading this repository
        # is all it needs, so a node (or a pod that reaches its credentials) cannot read the
        # other repositories of the project, as a project-wide reader role would allow.
        nodes = gke_cluster(cluster).node_service_account
        gcp.artifactregistry.RepositoryIamMember(
            f"{name}-repo-nodes-reader",
            project=repo.project,
            location=repo.location,
            repository=repo.name,
            role=NODE_PULL_ROLE,
            member=nodes.email.apply(lambda email: f"serviceAccount:{email}"),
            opts=self._opts,
        )
        host = f"{cfg.region}-docker.pkg.dev"
        url = pulumi.Output.concat(host, "/", repo.project, "/", repo.repository_id, "/")
        client = gcp.organizations.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(provider=self._opts.provider)
        )
        login = {
            "address": host,
            "username": "oauth2accesstoken",
            "password": pulumi.Output.secret(client.access_token),
        }
        return pulumi.Output.concat(url, IMAGE_NAME), [login]

    def _ecr(self, name: str, cfg: StackConfig, cluster: ClusterComponent):
        repo = aws.ecr.Repository(
            f"{name}-repo",
            name=f"stackbench-{cfg.stack}/{IMAGE_NAME}",
            force_delete=True,
            image_scanning_configuration={"scan_on_push": True},
            opts=self._opts,
        )
        # The nodes pull the training image with their role; this repository is the only one
        # of the account it may read (infra/eks.py), as on gke.
        aws.iam.RolePolicy(
            f"{name}-repo-nodes-pull",
            role=eks_cluster(cluster).node_role.id,
            policy=repo.arn.apply(node_pull_policy),
            opts=self._opts,
        )
        token = aws.ecr.get_authorization_token_output(
            registry_id=repo.registry_id,
            opts=pulumi.InvokeOutputOptions(provider=self._opts.provider),
        )
        login = {
            "address": repo.repository_url.apply(lambda url: url.split("/", 1)[0]),
            "username": token.user_name,
            "password": pulumi.Output.secret(token.password),
        }
        return repo.repository_url, [login]


def build_args(cfg: StackConfig) -> dict[str, str]:
    """The Dockerfile's arguments: the torch variant, and the user pods run as (one uid for the
    image and the manifests, contract/stack.py)."""
    return {"VARIANT": cfg.image_variant, "UID": str(IMAGE_UID), "HOME_DIR": IMAGE_HOME}
