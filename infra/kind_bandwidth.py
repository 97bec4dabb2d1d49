"""Pod bandwidth shaping on kind: a node image with the CNI bandwidth plugin, chained after
kindnet's plugins, so the kind stack enforces kubernetes.io/{ingress,egress}-bandwidth.

kind's default CNI, kindnet, writes /etc/cni/net.d/10-kindnet.conflist (ptp with host-local
IPAM over the node's pod CIDR, then portmap) and no bandwidth plugin, whose binary kind's node
image also lacks. So the stack builds its node image with the plugin (images/kind-node.Dockerfile)
and, once the cluster exists, writes 05-stackbench.conflist on every node: kindnet's chain with
the bandwidth plugin appended. containerd uses the first configuration by file name, so 05 wins
over kindnet's 10, which kindnet may rewrite at will; kindnet goes on routing between nodes.
The network keeps kindnet's name, so both configurations share one IPAM store and never hand
out the same address twice. Shaping ingress needs the host kernel's ifb module.

Pure functions returning text for infra/kind.py's create script; nothing runs here.
"""

from __future__ import annotations

import json
import shlex

from infra.settings import PROJECT_ROOT
from infra.sources import kind_node_image

NODE_DOCKERFILE = PROJECT_ROOT / "images" / "kind-node.Dockerfile"
CONFLIST = "/etc/cni/net.d/05-stackbench.conflist"
NETWORK_NAME = "kindnet"  # kindnet's: the same host-local IPAM store (see the docstring)
IPAM_DATA_DIR = "/run/cni-ipam-state"


def node_image(kubernetes_version: str) -> str:
    """The local tag of the stack's node image (kind runs it from the local Docker images)."""
    return f"stackbench-kind-node:v{kubernetes_version}"


def build_command(kubernetes_version: str) -> str:
    base = shlex.quote(kind_node_image(kubernetes_version))
    return (
        f"docker build -t {shlex.quote(node_image(kubernetes_version))} "
        f"--build-arg NODE_IMAGE={base} - < {shlex.quote(str(NODE_DOCKERFILE))} >&2"
    )


def conflist_template() -> str:
    """kindnet's chain plus bandwidth, as a printf format: %s the pod CIDR, then %s the MTU."""
    ptp = {
        "type": "ptp",
        "ipMasq": False,
        "ipam": {
            "type": "host-local",
            "dataDir": IPAM_DATA_DIR,
            "routes": [{"dst": "0.0.0.0/0"}],
            "ranges": [[{"subnet": "__CIDR__"}]],
        },
        "mtu": "__MTU__",
    }
    plugins = [
        ptp,
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
    ]
    text = json.dumps({"cniVersion": "0.3.1", "name": NETWORK_NAME, "plugins": plugins})
    return text.replace('"__CIDR__"', '"%s"').replace('"__MTU__"', "%s")


def chain_commands(control_plane: str) -> list[str]:
    """Shell lines, inside a `for node in ...` loop, that install the chained conflist on
    "$node"; $BANDWIDTH_CONFLIST holds conflist_template()."""
    kubectl = f"docker exec {control_plane} kubectl --kubeconfig /etc/kubernetes/admin.conf"
    return [
        f"  cidr=$({kubectl} get node \"$node\" -o 'jsonpath={{.spec.podCIDR}}')",
        '  [ -n "$cidr" ] || { echo "node $node has no pod CIDR yet" >&2; exit 1; }',
        '  mtu=$(docker exec "$node" cat /sys/class/net/eth0/mtu)',
        '  printf "$BANDWIDTH_CONFLIST" "$cidr" "$mtu"'
        f' | docker exec -i "$node" cp /dev/stdin {CONFLIST}',
    ]
