"""The kind stack's create and delete scripts, as the real program registers them, run for real
by their recorded interpreter against fake `docker` and `kind` executables (kind_fakes.py) that
record what they are asked and answer as a three-node cluster would: the create's steps and
output, each node's bandwidth chain, the failures that delete the cluster again, the results
folder it takes, and a changed stack replacing the cluster. A killed create is in
test_infra_kind_killed.py and test_infra_kind_orphan.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from infra_harness import Registered, evaluate
from kind_fakes import NODES, run_create

from contract.stack import IMAGE_UID, RESULTS_MOUNT_PATH
from infra import kind_bandwidth


def test_create_prints_only_the_kubeconfig_and_does_the_steps_in_order(fake_tools: Path):
    done = run_create(fake_tools / "store")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"kind": "Config"}  # Pulumi reads stdout as the kubeconfig
    log = (fake_tools / "log").read_text().splitlines()
    steps = [line.split()[1] for line in log if line.split()[1] in ("build", "create")]
    assert steps == ["build", "create"]
    assert (fake_tools / "store").is_dir()
    image = kind_bandwidth.node_image("1.33.1")
    assert f"--image {image}" in next(line for line in log if line.startswith("kind create"))
    assert "ARG CNI_PLUGINS_COMMIT=" in (fake_tools / "Dockerfile.built").read_text()
    chown = f"docker exec {NODES[0]} chown {IMAGE_UID}:{IMAGE_UID} {RESULTS_MOUNT_PATH}"
    assert chown in log
    assert not any(line.startswith("kind delete") for line in log)  # the cluster stays up


def test_every_node_gets_the_bandwidth_chain_for_its_own_pod_cidr(fake_tools: Path):
    assert run_create(fake_tools / "store").returncode == 0
    cidrs = set()
    for node in NODES:
        conflist = json.loads((fake_tools / node / Path(kind_bandwidth.CONFLIST).name).read_text())
        assert [p["type"] for p in conflist["plugins"]] == ["ptp", "portmap", "bandwidth"]
        assert conflist["plugins"][0]["mtu"] == 1500
        [[subnet]] = conflist["plugins"][0]["ipam"]["ranges"]
        cidrs.add(subnet["subnet"])
        assert (fake_tools / node / "hosts.toml").read_text().startswith("[host.")
    assert cidrs == {"10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"}


def test_a_node_without_a_pod_cidr_fails_the_create_and_deletes_the_cluster(fake_tools: Path):
    """A failed create is not in the stack's state, so destroy would never delete what it made
    and the next `up` would find the cluster's name taken: the script deletes it itself."""
    docker = fake_tools / "bin" / "docker"
    docker.write_text(docker.read_text().replace("echo -n 10.244.1.0/24", "true"))
    done = run_create(fake_tools / "store")
    assert done.returncode != 0
    assert "node stackbench-kind-worker has no pod CIDR yet" in done.stderr
    assert done.stdout == ""  # no kubeconfig of a cluster that is gone
    log = (fake_tools / "log").read_text().splitlines()
    assert log[-1] == "kind delete cluster --name stackbench-kind"


@pytest.mark.parametrize("listing", ["exit 1 ;;", "true ;;"])
def test_a_cluster_whose_nodes_cannot_be_listed_fails_the_create(fake_tools: Path, listing):
    """Every node needs the registry mirror and the bandwidth chain: a create that configured
    none (kind failing, or listing nothing) must not pass as made."""
    kind = fake_tools / "bin" / "kind"
    listed = f"printf '%s\\n' {' '.join(NODES)} ;;"
    assert listed in kind.read_text()
    kind.write_text(kind.read_text().replace(listed, listing))
    done = run_create(fake_tools / "store")
    assert done.returncode != 0
    assert done.stdout == ""
    log = (fake_tools / "log").read_text().splitlines()
    assert log[-1] == "kind delete cluster --name stackbench-kind"
    assert not any(line.startswith("docker exec") and "hosts.toml" in line for line in log)
    if listing == "true ;;":
        assert "kind lists no nodes for cluster stackbench-kind" in done.stderr


def test_a_failed_last_step_still_deletes_the_cluster(fake_tools: Path):
    kind = fake_tools / "bin" / "kind"
    kind.write_text(kind.read_text().replace('echo \'{"kind": "Config"}\' ;;', "exit 1 ;;"))
    done = run_create(fake_tools / "store")
    assert done.returncode != 0
    log = (fake_tools / "log").read_text().splitlines()
    assert log[-2:] == [
        "kind get kubeconfig --name stackbench-kind",
        "kind delete cluster --name stackbench-kind",
    ]


def test_a_results_dir_holding_someone_elses_files_is_refused_before_anything_is_made(
    fake_tools: Path,
):
    """The create hands the folder to the image's user: a resultsDir that already holds files
    (a home folder, by a typo) must not be taken from its owner."""
    store = fake_tools / "home"
    store.mkdir()
    (store / "notes.txt").write_text("mine")
    done = run_create(store)
    assert done.returncode != 0
    assert f"resultsDir {store} already holds files that are not a results store" in done.stderr
    assert "pulumi config set stackbench:resultsDir" in done.stderr
    assert not (fake_tools / "log").exists()  # no image built, no cluster made
    assert store.stat().st_uid == os.getuid()


@pytest.mark.parametrize("contents", ["empty", "a previous store"])
def test_an_empty_results_dir_or_a_previous_store_is_used(fake_tools: Path, contents: str):
    store = fake_tools / "store"
    store.mkdir()
    if contents == "a previous store":
        if os.geteuid() != 0:
            pytest.skip("handing the folder to the image's uid, as a cluster did, needs root")
        (store / "run-1").mkdir()
        os.chown(store, IMAGE_UID, IMAGE_UID)  # what the last cluster's chown made of it
    assert run_create(store).returncode == 0


# ---- changing a kind stack ---------------------------------------------------------------


def cluster_command(overrides: dict[str, str] | None = None) -> Registered:
    return evaluate("kind", overrides).one("command:local:Command", "-cluster")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    "overrides",
    [{"stackbench:kubernetesVersion": "1.32.2"}, {"stackbench:maxNodes": "3"}],
    ids=["kubernetesVersion", "maxNodes"],
)
def test_a_changed_stack_replaces_the_cluster_deleting_the_old_one_first(overrides):
    """pulumi-command runs a changed create script as an update, i.e. `kind create cluster`
    again under the name the cluster already has, which kind refuses; only a trigger makes the
    change a replacement, and Pulumi's default replacement (create, then delete the old) would
    meet the same name. So every input of the script is a trigger and the old goes first."""
    before, after = cluster_command(), cluster_command(overrides)
    assert after.inputs["triggers"] != before.inputs["triggers"]
    assert after.inputs["create"] in after.inputs["triggers"]
    # Nothing else may change it by an update either: that would run the create script again.
    inputs = {k: v for k, v in after.inputs.items() if k not in ("triggers", "environment")}
    flat = [x for v in inputs.values() for x in (v if isinstance(v, list) else [v])]
    assert set(flat) <= set(after.inputs["triggers"])
    assert before.delete_before_replace and after.delete_before_replace
