"""KindCluster: a local kind cluster with a local registry and a host results directory.

Runs `kind` and `docker` on the machine that runs `pulumi up` (pulumi-command), so both must
be installed there; nothing is reached over the network but Docker Hub for the node, registry
and Go images and GitHub for the CNI plugins' source. The nodes mount the host results
directory at /results (extraMounts), which is how jobs on kind write results the runner reads
as file:///host/dir. The nodes run the stack's own node image, whose CNI chain enforces pod
bandwidth annotations (infra/kind_bandwidth.py). Not a cloud cluster: CPU only, one kind stack
per host (the registry port is fixed).

A `pulumi up` killed while the cluster is being made leaves a cluster the stack's state does
not hold. The next `up` deletes it before making the cluster again, and `pulumi destroy`
deletes it with the registry (which the state holds by then). A cluster of the stack's name
counts as the stack's own only if its control plane mounts the stack's resultsDir at
/results; any other is refused, never deleted. The killed engine's `kind create` may still be
running (it takes minutes): the create holds an exclusive flock on the resultsDir folder from
start to end, which every process it starts inherits, so the lock stays held until the last
of an orphaned create is gone; the next `up` and `pulumi destroy` take the same lock before
they look for a leftover cluster, and wait for it (LOCK_WAIT_S at most, then fail naming the
processes that hold it).
"""

from __future__ import annotations

import json
import shlex

import pulumi
import pulumi_command as command

from contract.stack import IMAGE_UID, RESULTS_MOUNT_PATH
from contract.stackconfig.config import StackConfig
from contract.stackconfig.pools import training_pool
from infra import kind_bandwidth
from infra.cluster import ClusterComponent
from infra.sources import KIND_REGISTRY

REGISTRY_IMAGE = KIND_REGISTRY.reference()
REGISTRY_PORT = 5001  # host port; pods pull localhost:5001/..., which containerd maps below
REGISTRY_HOST = f"localhost:{REGISTRY_PORT}"
# The registry container's label naming the resultsDir of the stack that made it: a container
# of the registry's name is the stack's own only if it carries this stack's resultsDir.
OWNER_LABEL = "io.stackbench.results-dir"
# pulumi-command runs a script with /bin/sh by default, which is dash on Debian and Ubuntu:
# it knows no `set -o pipefail` nor here-strings, and the create would fail on its first line.
INTERPRETER = ["/bin/bash", "-c"]
LOCK_FD = 9  # the create's lock on the resultsDir folder; every child of the script inherits it
# Longer than a `kind create` that is pulling the node image and waiting 180 s for its nodes.
LOCK_WAIT_S = 600


def kind_config(cfg: StackConfig) -> dict:
    """The kind cluster config: one control plane and maxNodes workers, all mounting results."""
    mount = [{"hostPath": cfg.results_dir, "containerPath": RESULTS_MOUNT_PATH}]
    nodes = [{"role": "control-plane", "extraMounts": mount}]
    workers = training_pool(cfg).max_nodes
    nodes += [{"role": "worker", "extraMounts": mount} for _ in range(workers)]
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": cluster_name(cfg),
        # The API server listens on loopback only: nothing outside this host reaches it.
        "networking": {"apiServerAddress": "127.0.0.1"},
        # containerd reads per-registry hosts.toml files; create_script writes the one that
        # sends localhost:5001 to the registry container.
        "containerdConfigPatches": [
            '[plugins."io.containerd.grpc.v1.cri".registry]\n'
            '  config_path = "/etc/containerd/certs.d"\n'
        ],
        "nodes": nodes,
    }


def cluster_name(cfg: StackConfig) -> str:
    return f"stackbench-{cfg.stack}"


def registry_name(cfg: StackConfig) -> str:
    return f"{cluster_name(cfg)}-registry"


def create_script(cfg: StackConfig) -> str:
    """Build the node image, create the cluster, point every node at the registry and chain the
    bandwidth plugin there, hand the results folder to the image user, print the kubeconfig."""
    name, registry = shlex.quote(cluster_name(cfg)), shlex.quote(registry_name(cfg))
    image = shlex.quote(kind_bandwidth.node_image(cfg.kubernetes_version))
    hosts_dir = f"/etc/containerd/certs.d/{REGISTRY_HOST}"
    return "\n".join(
        [
            "set -euo pipefail",
            *store_guard(cfg),
            f"mkdir -p {shlex.quote(cfg.results_dir)}",
            *lock_store(cfg),
            kind_bandwidth.build_command(cfg.kubernetes_version),
            # Pulumi runs this only for a cluster its state lacks: one of this name that is
            # the stack's own was left by a create that was killed (with `pulumi up`) or
            # failed before this script could delete it, and is in an unknown state.
            f"if {owned_cluster_test(cfg)}; then",
            f"  echo 'deleting kind cluster {cluster_name(cfg)}, left by an interrupted create'"
            " >&2",
            f"  kind delete cluster --name {name} >&2",
            f"elif {cluster_exists_test(cfg)}; then",
            *refuse_foreign_cluster(cfg),
            "fi",
            # A create that fails is not in the stack's state, so `pulumi destroy` would never
            # delete this cluster, and the next `up` would find its name taken: a failing step
            # from here on takes the cluster down with it (a killed script cannot; the check
            # above, and the registry's delete, clean that up).
            f"trap 'kind delete cluster --name {name} >&2' EXIT",
            f'printf "%s" "$KIND_CONFIG" | kind create cluster --name {name} --image {image}'
            " --config - --wait 180s >&2",
            # Listed first: a failed substitution in a for-list would not stop the script, and
            # the cluster would pass as made with no registry mirror or bandwidth chain.
            f"nodes=$(kind get nodes --name {name})",
            f'[ -n "$nodes" ] || {{ echo "kind lists no nodes for cluster "{name} >&2; exit 1; }}',
            "for node in $nodes; do",
            f'  docker exec "$node" mkdir -p {hosts_dir}',
            f"  printf '[host.\"http://%s:5000\"]\\n' {registry}"
            f' | docker exec -i "$node" cp /dev/stdin {hosts_dir}/hosts.toml',
            *kind_bandwidth.chain_commands(f"{name}-control-plane"),
            "done",
            f"docker network connect kind {registry} >&2 2>/dev/null || true",
            # Job pods run as the image's user and write the store through a hostPath, which
            # ignores fsGroup: the folder must belong to that user. Only pods (and root) can
            # then write it; the runner reads it as it is (files are 0644).
            f"docker exec {name}-control-plane chown {IMAGE_UID}:{IMAGE_UID} {RESULTS_MOUNT_PATH}",
            f"kind get kubeconfig --name {name}",
            "trap - EXIT",
        ]
    )


def store_guard(cfg: StackConfig) -> list[str]:
    """Refuse, before anything is made, a resultsDir that already holds files and is not a
    store (its owner is not the image's user): the create hands the folder to that user, so
    a typo such as a home folder would take it from its owner."""
    store = shlex.quote(cfg.results_dir)
    fix = f"pulumi config set stackbench:resultsDir /srv/stackbench-results --stack {cfg.stack}"
    return [
        f'if [ -d {store} ] && [ -n "$(ls -A {store})" ] '
        f'&& [ "$(stat -c %u {store})" != {IMAGE_UID} ]; then',
        f"  echo 'resultsDir {cfg.results_dir} already holds files that are not a results store"
        f" (not owned by uid {IMAGE_UID}); the cluster would take the folder over. Choose a new"
        f" or empty one: {fix}' >&2",
        "  exit 1",
        "fi",
    ]


def lock_store(cfg: StackConfig) -> list[str]:
    """Shell lines: take the exclusive flock on the resultsDir folder (which must exist) that a
    create holds from start to end, waiting LOCK_WAIT_S at most for one still running (a
    `pulumi up` killed mid-create leaves its `kind create` running, and that process holds the
    lock), then fail in one line naming the processes that hold it. The folder is the lock:
    it is what makes a cluster the stack's own, and it needs no file of its own."""
    store = shlex.quote(cfg.results_dir)
    name = cluster_name(cfg)
    holders = f"$(lock_holders {store})"
    return [
        "command -v flock >/dev/null || { echo 'flock(1) is not installed; it comes with"
        " util-linux: sudo apt-get install util-linux' >&2; exit 1; }",
        *lock_holders_function(),
        f"exec {LOCK_FD}<{store}",
        f"if ! flock -n {LOCK_FD}; then",
        f'  echo "waiting up to {LOCK_WAIT_S} s for an earlier create of kind cluster {name}'
        f' to end:{holders}" >&2',
        f'  flock -w {LOCK_WAIT_S} {LOCK_FD} || {{ echo "an earlier create of kind cluster'
        f" {name} (a killed pulumi up) still runs after {LOCK_WAIT_S} s:{holders}; wait for it"
        ' to end or kill it, then run this again" >&2; exit 1; }',
        "fi",
    ]


def lock_holders_function() -> list[str]:
    """Shell lines defining `lock_holders DIR`: ' pid N (command line)' for each process
    (of those this user may see) with an flock on an open DIR, from /proc, never from a file."""
    return [
        "lock_holders() {",
        "  local fd pid",
        '  for fd in $(find -L /proc/[0-9]*/fd -maxdepth 1 -samefile "$1" 2>/dev/null); do',
        "    pid=${fd#/proc/}; pid=${pid%%/*}",
        '    grep -qs FLOCK "/proc/$pid/fdinfo/${fd##*/}" || continue',
        "    printf ' pid %s (%s)' \"$pid\" \"$(tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null"
        ' | cut -c1-160 | sed "s/ *$//")"',
        "  done | head -c 600",
        "}",
    ]


def cluster_exists_test(cfg: StackConfig) -> str:
    """A shell test: kind has a cluster of the stack's name (whoever made it)."""
    name = shlex.quote(cluster_name(cfg))
    # A here-string, not a pipe: `grep -q` exiting early would fail the pipe under pipefail.
    return f'grep -qxF -- {name} <<<"$(kind get clusters 2>/dev/null || true)"'


def owned_cluster_test(cfg: StackConfig) -> str:
    """A shell test: a cluster of the stack's name exists and is this stack's, i.e. its
    control plane mounts this stack's resultsDir at /results (kind mounts it from the first
    moment its nodes exist). The name alone is no proof: another checkout's stack of the same
    name, or a cluster made by hand, has it too, and must never be deleted from here."""
    node = shlex.quote(f"{cluster_name(cfg)}-control-plane")
    mounts = (
        "'{{range .Mounts}}{{if eq .Destination \"" + RESULTS_MOUNT_PATH + '"}}'
        "{{.Source}}{{end}}{{end}}'"
    )
    source = f"$(docker inspect -f {mounts} {node} 2>/dev/null || true)"
    return f'{cluster_exists_test(cfg)} && [ "{source}" = {shlex.quote(cfg.results_dir)} ]'


def refuse_foreign_cluster(cfg: StackConfig) -> list[str]:
    """Shell lines: say that the stack's cluster name is taken by a cluster not its own,
    and how to free it, then fail."""
    name = cluster_name(cfg)
    return [
        f"  echo 'a kind cluster named {name} exists that this stack did not make (its"
        f" control plane does not mount {cfg.results_dir}); delete it if it is yours to"
        f" delete: kind delete cluster --name {name}' >&2",
        "  exit 1",
    ]


def cluster_delete_command(cfg: StackConfig) -> str:
    return f"kind delete cluster --name {shlex.quote(cluster_name(cfg))}"


def registry_owner(cfg: StackConfig) -> str:
    """A shell command: print the OWNER_LABEL of the container of the registry's name (empty
    for one made before the label was), fail if there is no such container."""
    label = "'{{index .Config.Labels \"" + OWNER_LABEL + "\"}}'"
    return f"docker inspect --type container -f {label} {shlex.quote(registry_name(cfg))}"


def registry_create_script(cfg: StackConfig) -> str:
    """Start the registry container, labelled with the stack's resultsDir; keep one of the
    stack's own (an earlier `up`), and refuse one of that name that another stack made: its
    cluster pulls from it, and this stack's destroy would remove it."""
    registry, store = shlex.quote(registry_name(cfg)), shlex.quote(cfg.results_dir)
    return "\n".join(
        [
            "set -euo pipefail",
            f"if owner=$({registry_owner(cfg)} 2>/dev/null); then",
            f'  if [ -n "$owner" ] && [ "$owner" != {store} ]; then',
            f"    echo 'a container named {registry_name(cfg)} exists that this stack did not"
            f" make (it serves the kind stack whose resultsDir is '\"$owner\"'; one kind stack"
            f" per host); destroy that stack, or remove it if it is yours to remove: docker rm"
            f" -f {registry_name(cfg)}' >&2",
            "    exit 1",
            "  fi",
            "else",
            f"  docker run -d --restart=always -p 127.0.0.1:{REGISTRY_PORT}:5000"
            f" --label {shlex.quote(f'{OWNER_LABEL}={cfg.results_dir}')} --name {registry}"
            f" {REGISTRY_IMAGE}",
            "fi",
        ]
    )


def registry_delete_script(cfg: StackConfig) -> str:
    """Remove the registry and, first, a cluster of the stack's own that the state does not
    hold (a killed `pulumi up` left it): the registry is in the state before the cluster's
    create starts, so `pulumi destroy` runs this whatever became of that create. A cluster
    the state holds is gone by now (it is deleted before the registry it depends on)."""
    name, registry = shlex.quote(cluster_name(cfg)), shlex.quote(registry_name(cfg))
    store = shlex.quote(cfg.results_dir)
    return "\n".join(
        [
            # A failed `kind delete` must fail the destroy, not pass as the registry's rm.
            "set -euo pipefail",
            # Without the folder no create of this stack ever began (it makes the folder first).
            f"if [ -d {store} ]; then",
            *lock_store(cfg),
            f"  if {owned_cluster_test(cfg)}; then kind delete cluster --name {name} >&2; fi",
            "fi",
            # Only the stack's own registry (or an unlabelled one, made before the label was);
            # another stack's is left to it.
            f"if owner=$({registry_owner(cfg)} 2>/dev/null); then",
            f'  if [ -z "$owner" ] || [ "$owner" = {store} ]; then docker rm -f {registry}; else',
            f"    echo 'leaving container {registry_name(cfg)}: another kind stack made it"
            " (its resultsDir is '\"$owner\"')' >&2",
            "  fi",
            "fi",
        ]
    )


def cluster_triggers(cfg: StackConfig, script: str) -> list[str]:
    """Everything the cluster is made from or deleted by; a change to any of them replaces
    the cluster. Any other change would be an update, which pulumi-command runs as the create
    script again, on a cluster that exists (and which that script then takes for one a killed
    create left behind)."""
    return [
        script,
        cluster_delete_command(cfg),
        *INTERPRETER,
        json.dumps(kind_config(cfg), sort_keys=True),
        kind_bandwidth.conflist_template(),
        kind_bandwidth.NODE_DOCKERFILE.read_text(),
    ]


class KindCluster(ClusterComponent):
    """A kind cluster plus its local registry; fills the ClusterComponent contract."""

    def __init__(self, name: str, cfg: StackConfig, opts=None) -> None:
        super().__init__("stackbench:index:KindCluster", name, cfg, opts)
        self.bandwidth_shaping = True  # kind_bandwidth.py
        child = pulumi.ResourceOptions(parent=self)
        self.registry = command.local.Command(
            f"{name}-registry",
            create=registry_create_script(cfg),
            delete=registry_delete_script(cfg),
            interpreter=INTERPRETER,
            opts=child,
        )
        script = create_script(cfg)
        self.cluster_resource = command.local.Command(
            f"{name}-cluster",
            create=script,
            delete=cluster_delete_command(cfg),
            interpreter=INTERPRETER,
            environment={
                "KIND_CONFIG": json.dumps(kind_config(cfg), indent=2),
                "BANDWIDTH_CONFLIST": kind_bandwidth.conflist_template(),
            },
            # A change to anything the cluster is made from means a new cluster: kind cannot
            # edit one in place. Without a trigger a changed script (the node image of another
            # kubernetesVersion) would be an update, which pulumi-command runs as the create
            # script again, and `kind create cluster` fails on the name it already has.
            triggers=cluster_triggers(cfg, script),
            # The new cluster has the old one's name: the old must go first (Pulumi's default,
            # create-then-delete, would fail on the taken name).
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.registry],
                additional_secret_outputs=["stdout"],
                delete_before_replace=True,
            ),
        )
        self.cloud_provider = None
        self.registry_address = REGISTRY_HOST
        self.results_uri = f"file://{cfg.results_dir}"
        self._make_k8s_provider(self.cluster_resource.stdout)
        self._finish(registry_address=self.registry_address, results_uri=self.results_uri)


def kind_cluster(cluster: ClusterComponent) -> KindCluster:
    """`cluster` as the kind cluster it is where a stack's provider is kind (its registry and
    host-path results store are kind's alone); another kind is a bug in the caller."""
    if not isinstance(cluster, KindCluster):
        raise TypeError(f"expected a KindCluster, got a {type(cluster).__name__}")
    return cluster
