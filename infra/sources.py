"""Everything a stack installs from outside this repository: where it comes from and which
version, in one list that infra/addons.py and infra/kind.py install from and docs/clusters.md
shows (tests/infra/test_infra_sources.py holds the page, Pulumi.yaml's defaults and the URLs'
grammar to this module).

Each source is written as the tool that fetches it reads it: a Helm chart as a repository (or
an OCI reference) plus a chart version, a kustomize remote target in kustomize's own
`https://HOST/ORG/REPO//PATH?ref=TAG` form (a GitHub page URL such as `/tree/TAG/PATH` is no
such target: kustomize would clone the default branch and look for a folder named `tree`),
and an image by a tag it cannot move from. A version a stack may change is a stack setting
(`config_key`); its default here equals Pulumi.yaml's. Not here: the cloud's own parts (the
GKE and EKS control planes, GKE's GPU driver and device plugin, EKS' AMI), which the cloud
picks for the Kubernetes version set, and the training image, which the stack builds.

Standard library only: the runner (`runner doctor`) and the docs' test import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["helm", "kustomize", "image"]


@dataclass(frozen=True)
class Source:
    """One thing a stack installs, pinned. `location` is a Helm repository URL (or an OCI
    chart reference), a kustomize target's `https://HOST/ORG/REPO//PATH` part, or an image's
    repository. `config_key` names the stack setting that may change the version (None: fixed
    here); `when` says which stacks install it."""

    name: str
    kind: Kind
    location: str
    version: str
    config_key: str | None
    when: str
    chart: str = ""  # helm: the chart's name in a repository ("" for an OCI reference)
    tag_prefix: str = ""  # kustomize, image: the git ref or image tag is prefix + version

    def reference(self, version: str | None = None) -> str:
        """What the installing tool is handed: the kustomize target with its ref, the image
        reference, or the chart reference (with `version` beside it as Helm's --version)."""
        version = version or self.version
        if self.kind == "kustomize":
            return f"{self.location}?ref={self.tag_prefix}{version}"
        if self.kind == "image":
            return f"{self.location}:{self.tag_prefix}{version}"
        return self.location if not self.chart else f"{self.location} {self.chart}"


TRAINER = Source(
    name="Kubeflow Trainer (with JobSet 0.12.0, a dependency of its chart)",
    kind="helm",
    location="oci://ghcr.io/kubeflow/charts/kubeflow-trainer",
    version="2.3.0",
    config_key="trainerVersion",
    when="jobApi trainjob (the default)",
)
TRAINING_OPERATOR = Source(
    name="Kubeflow training-operator, standalone overlay",
    kind="kustomize",
    # The repository is now kubeflow/trainer (GitHub redirects the old name); v1.9.x's own
    # README installs it as kubeflow/training-operator, the name kept here.
    location="https://github.com/kubeflow/training-operator//manifests/overlays/standalone",
    version="1.9.4",
    config_key="trainingOperatorVersion",
    when="jobApi pytorchjob",
    tag_prefix="v",
)
DEVICE_PLUGIN = Source(
    name="NVIDIA device plugin",
    kind="helm",
    location="https://nvidia.github.io/k8s-device-plugin",
    chart="nvidia-device-plugin",
    version="0.18.2",
    config_key="devicePluginVersion",
    when="eks stacks with GPUs (GKE installs its own)",
)
KIND_REGISTRY = Source(
    name="Docker registry (the stack's image registry on kind)",
    kind="image",
    location="registry",
    version="2.8.3",
    config_key=None,
    when="kind stacks",
)
KIND_NODE = Source(
    name="kind node image (the stack adds the CNI bandwidth plugin: images/kind-node.Dockerfile)",
    kind="image",
    location="kindest/node",
    version="1.33.1",  # stacks/Pulumi.kind.yaml's kubernetesVersion
    config_key="kubernetesVersion",
    when="kind stacks",
    tag_prefix="v",
)

SOURCES: tuple[Source, ...] = (TRAINER, TRAINING_OPERATOR, DEVICE_PLUGIN, KIND_REGISTRY, KIND_NODE)


def kind_node_image(kubernetes_version: str) -> str:
    """The kind node image of a Kubernetes patch version ("1.33.1" -> kindest/node:v1.33.1)."""
    return KIND_NODE.reference(kubernetes_version)


def markdown_table() -> str:
    """The sources as docs/clusters.md shows them (the test compares the page with this)."""
    rows = [
        "| what | installed from | version | setting | on |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in SOURCES:
        where = f"`{s.reference()}`" if s.kind != "helm" else f"`{s.location}`"
        if s.chart:
            where += f", chart `{s.chart}`"
        setting = f"`{s.config_key}`" if s.config_key else "fixed"
        rows.append(f"| {s.name} | {where} | {s.version} | {setting} | {s.when} |")
    return "\n".join(rows)
