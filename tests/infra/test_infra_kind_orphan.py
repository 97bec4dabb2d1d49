"""The kind stack's scripts after a killed up whose `kind create` goes on running (pulling its node
image): destroy and the next up wait for it, then delete or make the cluster; one that outlasts
the wait fails destroy naming it; and a failed cluster delete fails destroy. Against the fake
`docker` and `kind` of kind_fakes.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from infra_harness import Registered
from kind_fakes import command_argv, run_create, run_registry_delete, stack_commands

from infra import kind as kind_module

# ---- a killed create whose `kind create` goes on running -------------------------------------


@pytest.fixture
def orphaned_create(fake_tools: Path) -> Iterator[Callable[[], int]]:
    """Start the create with a `kind create` that pulls its node image until the test lets it
    go on (let_kind_go_on), wait until kind runs, then SIGKILL the script alone, as a killed
    `pulumi up` leaves it: kind goes on, an orphan, and makes the cluster after the script is
    gone. Returns the orphan's pid; whatever is left of it is killed after the test."""
    groups: list[int] = []

    def start() -> int:
        os.mkfifo(fake_tools / "pulling")
        cluster, _ = stack_commands(fake_tools / "store")
        with open(fake_tools / "orphan.out", "w") as out:  # not a pipe: the orphan outlives us
            proc = subprocess.Popen(
                command_argv(cluster, "create"),
                env={**os.environ, **cluster.inputs["environment"]},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        groups.append(proc.pid)
        for _ in range(600):
            if (fake_tools / "creating").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (fake_tools / "creating").exists(), (fake_tools / "orphan.out").read_text()
        proc.kill()
        assert proc.wait() == -signal.SIGKILL
        kind = subprocess.run(
            # bin/kind, not the script's subshells, whose command line holds the whole script
            ["pgrep", "-s", str(proc.pid), "-f", "bin/kind create cluster"],
            capture_output=True,
            text=True,
        )
        [orphan] = kind.stdout.split()
        return int(orphan)

    yield start
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def let_kind_go_on(fake_tools: Path, orphan: int) -> None:
    """The orphan's image pull ends: it makes the cluster's nodes and exits."""
    fd = os.open(fake_tools / f"pulling.{orphan}", os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: gone
    os.close(fd)


def run_while_kind_pulls(
    fake_tools: Path, orphan: int, command: Registered, script: str
) -> subprocess.CompletedProcess[str]:
    """`command`'s `script` (a create or a delete), the orphan let go on only once the script
    says it waits for it: on a busy machine the orphan must not end before the script looked."""
    argv = command_argv(command, script)
    env = {**os.environ, **command.inputs.get("environment", {})}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:
        said.append(line)
        if "for an earlier create" in line:
            let_kind_go_on(fake_tools, orphan)
            break
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, "".join(said) + stderr)


def wait_until_ended(pid: int) -> None:
    """Until `pid` runs no more (gone, or a zombie its new parent has yet to reap)."""
    status = Path(f"/proc/{pid}/status")
    for _ in range(1200):
        with contextlib.suppress(FileNotFoundError):
            if "\nState:\tZ" not in status.read_text():
                time.sleep(0.05)
                continue
        return
    raise AssertionError(f"pid {pid} still runs")


def test_destroy_waits_for_a_killed_ups_kind_create_then_deletes_its_cluster(
    fake_tools: Path, orphaned_create: Callable[[], int]
):
    """Without the create's lock, destroy looks while kind is still pulling its image, finds
    no cluster, and kind makes one after destroy has ended: a cluster no stack knows of."""
    orphan = orphaned_create()
    _, registry = stack_commands(fake_tools / "store")
    done = run_while_kind_pulls(fake_tools, orphan, registry, "delete")
    assert done.returncode == 0, done.stderr
    assert f"waiting up to {kind_module.LOCK_WAIT_S} s for an earlier create" in done.stderr
    assert f"pid {orphan} (" in done.stderr
    wait_until_ended(orphan)  # nothing is left to make a cluster after destroy
    assert os.listdir(fake_tools / "clusters") == []


def test_the_next_up_waits_for_a_killed_ups_kind_create_then_makes_the_cluster_again(
    fake_tools: Path, orphaned_create: Callable[[], int]
):
    orphan = orphaned_create()
    cluster, _ = stack_commands(fake_tools / "store")
    done = run_while_kind_pulls(fake_tools, orphan, cluster, "create")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"kind": "Config"}
    assert f"pid {orphan} (" in done.stderr
    assert "left by an interrupted create" in done.stderr
    log = (fake_tools / "log").read_text().splitlines()
    # The orphan's create, then the leftover's delete, then the create of this `up`.
    steps = [line.split()[1] for line in log if line.startswith(("kind create", "kind delete"))]
    assert steps == ["create", "delete", "create"]
    assert os.listdir(fake_tools / "clusters") == ["stackbench-kind"]


def test_a_kind_create_that_outlasts_the_wait_fails_destroy_naming_it(
    fake_tools: Path, orphaned_create: Callable[[], int], monkeypatch: pytest.MonkeyPatch
):
    """Destroy must not report the stack gone while a create of it still runs: it fails in
    one line that names the process, and leaves the registry for the next destroy."""
    monkeypatch.setattr(kind_module, "LOCK_WAIT_S", 1)
    orphan = orphaned_create()  # never let go on: it outlasts the wait
    done = run_registry_delete(fake_tools / "store")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("an earlier create of kind cluster stackbench-kind")
    assert f"pid {orphan} (" in last
    assert "kind create cluster --name stackbench-kind" in last
    assert "wait for it to end or kill it, then run this again" in last
    log = (fake_tools / "log").read_text()
    assert "docker rm" not in log and "kind delete" not in log


def test_a_failed_cluster_delete_fails_destroy(fake_tools: Path):
    """A leftover cluster that `kind delete` could not remove must not read as destroyed."""
    store = fake_tools / "store"
    assert run_create(store).returncode == 0
    kind = fake_tools / "bin" / "kind"
    kind.write_text(
        kind.read_text().replace('"delete cluster") rm', '"delete cluster") exit 1; rm')
    )
    done = run_registry_delete(store)
    assert done.returncode != 0
    assert "docker rm" not in (fake_tools / "log").read_text()
