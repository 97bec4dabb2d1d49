"""Reading a stack's settings from Pulumi.yaml and stacks/ as the Pulumi CLI hands them over
(contract/stackconfig/stackfiles.py), for `runner cost`, teardown and these tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from infra_harness import REPO

from contract.stackconfig import stackfiles
from contract.stackconfig.config import ConfigError


def project(tmp_path: Path, stack_text: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.s.yaml").write_text(stack_text)
    return tmp_path


def test_stacks_dir_is_pulumi_yamls_stack_config_dir():
    assert yaml.safe_load((REPO / "Pulumi.yaml").read_text())["stackConfigDir"] == (
        stackfiles.STACKS_DIR
    )


def test_stack_names_are_the_stack_files():
    assert stackfiles.stack_names(REPO) == [
        "eks-gpu-8", "gke-a100-1x8", "gke-cpu-16", "gke-gpu-8", "kind"
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["nosuch", "../stacks/Pulumi.kind", ".kind", "", "a b"])
def test_an_unknown_stack_names_the_stacks_that_exist(name):
    with pytest.raises(stackfiles.StackFileError) as err:
        stackfiles.stack_file(REPO, name)
    assert "(stacks: eks-gpu-8, gke-a100-1x8, gke-cpu-16, gke-gpu-8, kind)" in str(err.value)


def test_a_fully_qualified_stack_name_reads_its_short_names_file():
    assert stackfiles.stack_file(REPO, "acme/stackbench/kind").name == "Pulumi.kind.yaml"


def test_values_are_declared_defaults_overlaid_with_the_stack_file(tmp_path):
    root = project(tmp_path, (
        "config:\n"
        "  stackbench:provider: eks\n"
        "  stackbench:maxNodes: 3\n"            # YAML int, as `pulumi config set` may leave it
        "  spot: true\n"                        # a bare key is the project's
        "  stackbench:apiAllowedCidrs:\n    - 10.1.0.0/16\n"
        "  aws:region: eu-west-1\n"             # another namespace: not ours
    ))  # fmt: skip
    values = stackfiles.cli_values(root, "s")
    assert values["provider"] == "eks" and values["maxNodes"] == "3" and values["spot"] == "true"
    assert values["apiAllowedCidrs"] == '["10.1.0.0/16"]'
    assert values["jobApi"] == "trainjob" and values["deletionProtection"] == "true"
    assert "region" in values and values["region"] == ""  # aws:region did not leak in


def test_a_stack_file_that_is_not_a_mapping_is_refused(tmp_path):
    root = project(tmp_path, "- just\n- a list\n")
    with pytest.raises(stackfiles.StackFileError, match=r"Pulumi\.s\.yaml is not a YAML mapping"):
        stackfiles.cli_values(root, "s")


def test_a_value_that_aliases_multiply_is_refused_before_it_is_written_out(tmp_path):
    # 300 bytes naming 10^5 strings (each level ten aliases of the one below): a few more
    # levels and writing it out as the CLI string would take minutes and gigabytes.
    levels = ["  l0: &a0 [10.0.0.0/8" + ", 10.0.0.0/8" * 9 + "]\n"]
    levels += [f"  l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 5)]
    root = project(tmp_path, "config:\n" + "".join(levels) + "  stackbench:apiAllowedCidrs: *a4\n")
    with pytest.raises(stackfiles.StackFileError, match=r"Pulumi\.s\.yaml: l\d holds over 10,000"):
        stackfiles.cli_values(root, "s")


def test_a_file_nested_too_deeply_for_the_yaml_parser_is_refused_in_one_line(tmp_path):
    root = project(
        tmp_path, "config:\n  stackbench:apiAllowedCidrs: " + "[" * 50_000 + "]" * 50_000
    )
    with pytest.raises(stackfiles.StackFileError, match=r"Pulumi\.s\.yaml nests .* too deeply"):
        stackfiles.cli_values(root, "s")


def test_load_validates_through_the_programs_parser(tmp_path):
    root = project(tmp_path, "config:\n  stackbench:provider: gke\n")
    with pytest.raises(ConfigError) as err:
        stackfiles.load(root, "s")
    assert err.value.key == "region"


def test_every_stack_file_loads():
    for name in stackfiles.stack_names(REPO):
        assert stackfiles.load(REPO, name).stack == name
