"""The kind stack's scripts after a create killed mid-way (kind keeps its clusters in a folder, so
one can be left behind): the next up and destroy delete what it left; a cluster or registry of
the stack's name that is not its own is never deleted; the stack's own registry is kept by up
and removed by destroy. Against the fake `docker` and `kind` of kind_fakes.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from kind_fakes import (
    run_create,
    run_registry_create,
    run_registry_delete,
    start_create,
)

# ---- a create killed mid-way -----------------------------------------------------------------


def kill_create_mid_way(fake_tools: Path, store: Path) -> None:
    """Start the create, wait until `kind create cluster` has made the cluster's nodes, then
    SIGKILL the script and everything it started, as a killed `pulumi up` leaves it: no trap
    runs, and the stack's state never records the cluster."""
    assert run_registry_create(store).returncode == 0
    (fake_tools / "hang").touch()
    proc = start_create(store)
    try:
        for _ in range(600):
            if (fake_tools / "creating").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (fake_tools / "creating").exists(), proc.communicate()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    (fake_tools / "hang").unlink()
    assert proc.returncode == -signal.SIGKILL
    assert (fake_tools / "clusters" / "stackbench-kind").exists()  # left behind


def test_the_next_up_deletes_the_cluster_a_killed_create_left_and_makes_it_again(
    fake_tools: Path,
):
    store = fake_tools / "store"
    kill_create_mid_way(fake_tools, store)
    done = run_create(store)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"kind": "Config"}
    assert "left by an interrupted create" in done.stderr
    log = (fake_tools / "log").read_text().splitlines()
    second = log[log.index("kind delete cluster --name stackbench-kind") :]
    assert [line for line in second if line.startswith("kind create")] != []
    assert os.listdir(fake_tools / "clusters") == ["stackbench-kind"]


def test_destroy_deletes_the_cluster_a_killed_create_left(fake_tools: Path):
    """The registry is in the state before the cluster's create starts: its delete, the last
    step of `pulumi destroy`, takes the cluster the state never recorded with it."""
    store = fake_tools / "store"
    kill_create_mid_way(fake_tools, store)
    done = run_registry_delete(store)
    assert done.returncode == 0, done.stderr
    assert os.listdir(fake_tools / "clusters") == []
    log = (fake_tools / "log").read_text().splitlines()
    assert [line for line in log if line.startswith(("kind delete", "docker rm"))] == [
        "kind delete cluster --name stackbench-kind",
        "docker rm -f stackbench-kind-registry",
    ]


def test_a_cluster_of_the_stacks_name_that_is_not_its_own_is_never_deleted(fake_tools: Path):
    """Another checkout's stack of the same name, or a cluster made by hand: its nodes mount
    another results folder. The create refuses, naming the cluster; destroy leaves it."""
    other = fake_tools / "other-checkout-store"
    kill_create_mid_way(fake_tools, other)
    store = fake_tools / "store"
    done = run_create(store)
    assert done.returncode == 1
    assert "a kind cluster named stackbench-kind exists that this stack did not make" in (
        done.stderr
    )
    assert run_registry_delete(store).returncode == 0
    log = (fake_tools / "log").read_text().splitlines()
    assert not any(line.startswith("kind delete") for line in log)
    assert os.listdir(fake_tools / "clusters") == ["stackbench-kind"]


def test_a_registry_of_the_stacks_name_that_is_not_its_own_is_never_removed(fake_tools: Path):
    """The other checkout's cluster pulls its images from that registry: this stack's `up`
    refuses it rather than adopt it, and this stack's destroy leaves it."""
    other = fake_tools / "other-checkout-store"
    assert run_registry_create(other).returncode == 0
    store = fake_tools / "store"
    done = run_registry_create(store)
    assert done.returncode == 1
    assert "a container named stackbench-kind-registry exists that this stack did not make" in (
        done.stderr
    )
    assert str(other) in done.stderr
    done = run_registry_delete(store)
    assert done.returncode == 0, done.stderr
    assert "leaving container stackbench-kind-registry: another kind stack made it" in done.stderr
    assert "docker rm" not in (fake_tools / "log").read_text()
    assert (fake_tools / "containers" / "stackbench-kind-registry").read_text() == str(other)


def test_the_stacks_own_registry_is_kept_by_up_and_removed_by_destroy(fake_tools: Path):
    store = fake_tools / "store"
    assert run_registry_create(store).returncode == 0
    assert run_registry_create(store).returncode == 0  # pulumi-command's update: kept
    runs = [line for line in (fake_tools / "log").read_text().splitlines() if " run " in line]
    assert len(runs) == 1
    assert run_registry_delete(store).returncode == 0
    assert os.listdir(fake_tools / "containers") == []
