"""What the stacks install from outside (infra/sources.py) is written as its tools read it,
pinned, and shown as it is: in Pulumi.yaml's defaults and in docs/clusters.md."""

from __future__ import annotations

import re

import kustomize_target
import pytest
from infra_harness import REPO, project_schema, stack_file_config

from infra import sources

# Cases of kustomize's own api/internal/git/repospec_test.go (input -> host, repo, path, ref):
# the port reads them as kustomize does.
KUSTOMIZE_CASES = [
    ("https://github.com/kubernetes-sigs/kustomize//examples/multibases/dev/?ref=v1.0.6",
     "https://github.com/", "kubernetes-sigs/kustomize", "examples/multibases/dev/", "v1.0.6"),
    ("http://github.com/someorg/somerepo/somedir",
     "https://github.com/", "someorg/somerepo", "somedir", ""),
    ("git@github.com:someorg/somerepo.git/somedir",
     "git@github.com:", "someorg/somerepo.git", "somedir", ""),
    ("git@bitbucket.org:company/project.git//path?ref=branch",
     "git@bitbucket.org:", "company/project.git", "path", "branch"),
    ("ssh://git@bitbucket.org/company/project.git//path?ref=branch",
     "ssh://git@bitbucket.org/", "company/project.git", "path", "branch"),
    ("https://itfs.mycompany.com/collection/project/_git/somerepos/somedir?version=v1.0.0",
     "https://itfs.mycompany.com/", "collection/project/_git/somerepos", "somedir", "v1.0.0"),
    ("git@github.com/someorg/somerepo/somepath",
     "git@github.com:", "someorg/somerepo", "somepath", ""),
    ("https://git-codecommit.us-east-2.amazonaws.com/someorg/somerepo/somedir?ref=testbranch",
     "https://git-codecommit.us-east-2.amazonaws.com/", "someorg/somerepo", "somedir",
     "testbranch"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "host", "repo", "path", "ref"), KUSTOMIZE_CASES)
def test_the_grammar_port_reads_kustomizes_own_cases_as_kustomize_does(url, host, repo, path, ref):
    target = kustomize_target.parse(url)
    assert (target.host, target.repo_path, target.root_path, target.ref) == (host, repo, path, ref)


def test_the_grammar_port_refuses_what_kustomize_refuses():
    for url in ("/abs/path", "example.com/org/repo", "https://github.com/org//../up?ref=x"):
        with pytest.raises(ValueError):
            kustomize_target.parse(url)


def test_a_github_page_url_is_no_pinned_target_for_kustomize():
    """The URL the stacks used to hand kustomize: it clones the default branch and looks for
    a folder named `tree`, which is why the targets are written in the `//path?ref=` form."""
    page = "https://github.com/kubeflow/trainer/tree/v1.9.4/manifests/overlays/standalone"
    target = kustomize_target.parse(page)
    assert target.ref == "" and target.root_path.startswith("tree/v1.9.4/")


@pytest.mark.parametrize("source", [s for s in sources.SOURCES if s.kind == "kustomize"])
def test_every_kustomize_source_names_its_repository_folder_and_tag(source):
    target = kustomize_target.parse(source.reference())
    assert target.host == "https://github.com/"
    assert target.ref == f"{source.tag_prefix}{source.version}"
    assert target.root_path and not target.root_path.startswith(("tree/", "blob/"))
    assert source.location == f"{target.clone_spec}//{target.root_path}"


def test_the_training_operator_target_is_its_v1_9_standalone_overlay():
    target = kustomize_target.parse(sources.TRAINING_OPERATOR.reference("1.9.4"))
    assert target.clone_spec == "https://github.com/kubeflow/training-operator"
    assert (target.root_path, target.ref) == ("manifests/overlays/standalone", "v1.9.4")


@pytest.mark.parametrize("source", sources.SOURCES, ids=lambda s: s.location)
def test_every_source_is_pinned_to_a_version_that_cannot_move(source):
    assert re.fullmatch(r"\d+\.\d+\.\d+", source.version), source.version
    assert "latest" not in source.reference()
    if source.kind == "helm":
        assert source.location.startswith(("https://", "oci://"))
        assert bool(source.chart) != source.location.startswith("oci://")


def test_pulumi_yaml_defaults_are_the_sources_versions():
    """One version per source: a stack setting's default (Pulumi.yaml; kind's Kubernetes
    version in its stack file) is the one infra/sources.py lists."""
    schema = project_schema()
    for source in sources.SOURCES:
        if source.config_key == "kubernetesVersion":
            given = stack_file_config("kind")["stackbench:kubernetesVersion"]
        elif source.config_key:
            given = schema[source.config_key]["default"]
        else:
            continue
        assert str(given) == source.version, source.config_key


def test_the_cluster_guide_lists_every_source_as_the_module_has_it():
    page = (REPO / "docs" / "clusters.md").read_text()
    assert sources.markdown_table() in page, "docs/clusters.md: paste sources.markdown_table()"
