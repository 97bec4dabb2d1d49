"""The kind stack's create and delete scripts, as the real program registers them, run for real
by their recorded interpreter against fake `docker` and `kind` executables that record what
they are asked and answer as a three-node cluster would (kind keeps its clusters in a folder,
so one can be left behind by a killed create)."""

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
from infra_harness import Registered, evaluate

from contract.stack import IMAGE_UID, RESULTS_MOUNT_PATH
from infra import kind as kind_module
from infra import kind_bandwidth

NODES = ("stackbench-kind-control-plane", "stackbench-kind-worker", "stackbench-kind-worker2")

FAKE_DOCKER = """#!/bin/bash
echo "docker $*" >> "$FAKE_LOG"
case "$1" in
  build) cat > "$FAKE_ROOT/Dockerfile.built" ;;
  exec)
    shift; [ "$1" = "-i" ] && shift
    node="$1"; shift
    case "$*" in
      "cp /dev/stdin "*) mkdir -p "$FAKE_ROOT/$node"; cat > "$FAKE_ROOT/$node/$(basename "$3")" ;;
      *"get node "*) n=$(echo "$*" | sed 's/.*get node \\([^ ]*\\).*/\\1/');
                     case "$n" in *control-plane) echo -n 10.244.0.0/24 ;;
                                  *worker) echo -n 10.244.1.0/24 ;; *) echo -n 10.244.2.0/24 ;;
                     esac ;;
      "cat /sys/class/net/eth0/mtu") echo 1500 ;;
    esac ;;
  run)  # the registry: a file holding its owner label, named as the container
    label=$(echo "$*" | sed -n 's/.*--label [^=]*=\\(.*\\) --name.*/\\1/p')
    mkdir -p "$FAKE_ROOT/containers"; printf '%s' "$label" > "$FAKE_ROOT/containers/${@: -2:1}" ;;
  rm) rm "$FAKE_ROOT/containers/${@: -1}" ;;
  inspect)  # a registry's owner label, or the /results mount's source of a cluster's node
    container="${@: -1}"
    [ -f "$FAKE_ROOT/containers/$container" ] && { cat "$FAKE_ROOT/containers/$container"; exit 0; }
    case "$container" in *-registry) exit 1 ;; esac
    cluster="${container%-control-plane}"
    [ -f "$FAKE_ROOT/clusters/$cluster" ] || exit 1
    grep -o '"hostPath": "[^"]*"' "$FAKE_ROOT/clusters/$cluster" | head -1 | cut -d'"' -f4 ;;
esac
exit 0
"""
FAKE_KIND = """#!/bin/bash
echo "kind $*" >> "$FAKE_LOG"
mkdir -p "$FAKE_ROOT/clusters"
case "$1 $2" in
  "create cluster")
    if [ -e "$FAKE_ROOT/clusters/$4" ]; then
      echo "node(s) already exist for a cluster with the name $4" >&2; exit 1
    fi
    # kind pulling the node image: the cluster's nodes appear only when the test lets it go on
    # (opens the FIFO this kind took as its own), not after a time a busy machine may spend
    # elsewhere. Taken by one kind only: the next create does not wait.
    if [ -p "$FAKE_ROOT/pulling" ]; then
      mv "$FAKE_ROOT/pulling" "$FAKE_ROOT/pulling.$$"; touch "$FAKE_ROOT/creating"
      cat "$FAKE_ROOT/pulling.$$"
    fi
    cat > "$FAKE_ROOT/kind-config.json"; cp "$FAKE_ROOT/kind-config.json" "$FAKE_ROOT/clusters/$4"
    # A slow create (kind waits for the control plane), for a test to kill mid-way.
    if [ -e "$FAKE_ROOT/hang" ]; then touch "$FAKE_ROOT/creating"; sleep 60; fi ;;
  "delete cluster") rm -f "$FAKE_ROOT/clusters/$4" ;;
  "get clusters") ls "$FAKE_ROOT/clusters" ;;
  "get nodes") printf '%s\\n' {nodes} ;;
  "get kubeconfig") echo '{{"kind": "Config"}}' ;;
esac
"""


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "kind").write_text(FAKE_KIND.format(nodes=" ".join(NODES)))
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_ROOT", str(tmp_path))
    return tmp_path


def command_argv(resource: Registered, script: str) -> list[str]:
    """What pulumi-command runs: the resource's interpreter (its default: /bin/sh -c)."""
    return [*resource.inputs.get("interpreter", ["/bin/sh", "-c"]), resource.inputs[script]]


def stack_commands(results_dir: Path) -> tuple[Registered, Registered]:
    """The kind stack's cluster and registry commands, with `results_dir` as its resultsDir."""
    ev = evaluate("kind", {"stackbench:resultsDir": str(results_dir)})
    return ev.one("command:local:Command", "-cluster"), ev.one("command:local:Command", "-registry")


def start_create(results_dir: Path) -> subprocess.Popen[str]:
    cluster, _ = stack_commands(results_dir)
    return subprocess.Popen(
        command_argv(cluster, "create"),
        env={**os.environ, **cluster.inputs["environment"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, for a test to kill whole
    )


def run_create(results_dir: Path) -> subprocess.CompletedProcess[str]:
    proc = start_create(results_dir)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run_registry_create(results_dir: Path) -> subprocess.CompletedProcess[str]:
    """What `pulumi up` runs first on a kind stack: the registry the cluster depends on."""
    _, registry = stack_commands(results_dir)
    argv = command_argv(registry, "create")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def run_registry_delete(results_dir: Path) -> subprocess.CompletedProcess[str]:
    """What `pulumi destroy` runs for the registry, the last resource of a kind stack."""
    _, registry = stack_commands(results_dir)
    argv = command_argv(registry, "delete")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


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
