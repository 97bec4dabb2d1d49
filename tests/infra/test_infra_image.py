"""images/Dockerfile: pinned base, both variants, non-root, the workload package copied last.

No Docker engine here, so these read the Dockerfile the way a reviewer would; the build
itself runs on `pulumi up` (infra/image.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from infra_harness import REPO

from contract.stack import IMAGE_HOME, IMAGE_UID
from infra.image import DOCKERFILE

LINES = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
INSTRUCTIONS = [line for line in LINES if line and not line.startswith("#")]


def test_the_program_builds_the_dockerfile_in_images():
    assert Path(DOCKERFILE) == REPO / "images" / "Dockerfile"


def test_base_image_is_pinned_to_a_full_version():
    # The other stage is `FROM scratch AS plugins`, the plugins the image carries.
    [base] = [line for line in INSTRUCTIONS if line.startswith("FROM ") and " scratch " not in line]
    image = base.split()[1]
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", image), image


def test_variant_build_argument_selects_cuda_or_cpu_and_rejects_others():
    text = DOCKERFILE.read_text()
    assert "ARG VARIANT=cuda" in text
    assert "download.pytorch.org/whl/cpu" in text and "exit 2" in text


def arg_default(name: str) -> str:
    [value] = [line.split("=", 1)[1] for line in INSTRUCTIONS if line.startswith(f"ARG {name}=")]
    return value


def test_runs_as_the_contract_user_the_manifests_run_as():
    """One uid for image and pods (contract/stack.py): a mismatch leaves the home unwritable."""
    assert arg_default("UID") == str(IMAGE_UID) and IMAGE_UID >= 10000
    assert arg_default("HOME_DIR") == IMAGE_HOME
    users = [line.split()[1] for line in INSTRUCTIONS if line.startswith("USER ")]
    assert users == ["$UID"]
    text = DOCKERFILE.read_text()
    assert '--uid "$UID" --gid "$UID" --home-dir "$HOME_DIR"' in text
    assert 'groupadd --gid "$UID"' in text


def test_the_user_cannot_change_the_code_it_runs():
    copies = [line for line in INSTRUCTIONS if line.startswith("COPY ") and "/opt/" in line]
    assert copies and not any("--chown" in line for line in copies)


def test_the_image_carries_the_contract_package_the_workloads_import():
    assert "COPY contract/ /opt/stackbench/contract/" in INSTRUCTIONS
    ignore = (REPO / "images" / "Dockerfile.dockerignore").read_text().splitlines()
    assert "!contract/" in ignore


def test_workload_package_is_copied_after_dependencies_are_installed():
    copies = [i for i, line in enumerate(INSTRUCTIONS) if line.startswith("COPY ")]
    runs = [i for i, line in enumerate(INSTRUCTIONS) if line.startswith("RUN ")]
    assert "workloads/" in INSTRUCTIONS[copies[-1]]
    assert copies[-1] > max(runs)


def test_build_context_sends_only_what_the_image_copies():
    ignore = (REPO / "images" / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore and "!workloads/" in ignore


def test_the_stacks_plugins_are_staged_with_the_hash_a_run_records(tmp_path):
    """infra/image_plugins.py hashes the copy the image gets as a run hashes the plugin it
    loads (workloads/plugins/provenance.py): the same files, the same hash; a byte off, not."""
    from contract.imageplugins import parse_plugins
    from infra.image_plugins import stage
    from tests.workloads.plugin_packages import isolated_registries, write_package
    from workloads.plugins import loading, provenance

    package = write_package(tmp_path / "src", "stagedplug", {
        "__init__.py": "from stagedplug import part  # noqa: F401\n",
        "part.py": "X = 1\n",
    })  # fmt: skip
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "part.cpython-311.pyc").write_bytes(b"\0")
    staging = tmp_path / "staging"
    (carried,) = stage(("src/stagedplug",), tmp_path, staging)
    assert carried.name == carried.module == "stagedplug" and carried.version is None
    assert parse_plugins(json.loads((staging / "plugins.json").read_text())) == (carried,)
    assert not (staging / "stagedplug" / "__pycache__").exists()
    with isolated_registries(tmp_path / "src"):
        loading.load(str(package))
        assert provenance.source_hash("stagedplug") == carried.source_sha256
    (package / "part.py").write_text("X = 2\n")
    assert stage(("src/stagedplug",), tmp_path, staging)[0].source_sha256 != carried.source_sha256


@pytest.mark.parametrize("make, why", [
    (lambda p: p.mkdir(), "no __init__.py"),
    (lambda p: (p.mkdir(), (p / "__init__.py").write_text(""),
                (p / "x.py").symlink_to("/etc/hostname")), "symbolic link"),
])  # fmt: skip
def test_a_plugin_folder_the_image_cannot_carry_is_a_config_error(tmp_path, make, why):
    from contract.stackconfig.config_values import ConfigError
    from infra.image_plugins import stage

    make(tmp_path / "plug")
    with pytest.raises(ConfigError, match=why):
        stage(("plug",), tmp_path, tmp_path / "staging")
    assert not (tmp_path / "staging").exists()  # refused before anything is staged


def test_a_plugin_may_not_take_the_name_of_a_package_of_the_image(tmp_path):
    from contract.stackconfig.config_values import ConfigError
    from infra.image_plugins import stage

    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "__init__.py").write_text("")
    with pytest.raises(ConfigError, match="cannot be a plugin's module name"):
        stage(("workloads",), tmp_path, tmp_path / "staging")
