"""Fake `docker` and `kind` executables for the kind stack's tests, which record what they are
asked and answer as a three-node cluster would (kind keeps its clusters in a folder, so one can
be left behind by a killed create), and the stack's create and delete scripts run as
pulumi-command runs them. The fake_tools fixture that puts them on PATH is in conftest.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from infra_harness import Registered, evaluate

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
