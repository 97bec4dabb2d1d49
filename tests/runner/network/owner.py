"""An owner of a shaped network for the lifetime tests, run as its own process:

    python -m tests.runner.network.owner NUM_WORKERS LINK

It builds the network, starts `sleep` inside every worker's namespaces, prints one JSON line
(the holders' pids, the namespaces' inodes, the sleepers' nsenter pids) and waits to be killed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from runner.backends.local.network import ShapedNetwork
from runner.job.link import parse_link


def main() -> None:
    num_workers, link = int(sys.argv[1]), parse_link(sys.argv[2])
    net = ShapedNetwork.open(link, num_workers)
    sleepers = [
        subprocess.Popen(net.command(i, ["sleep", "600"], cwd="/")) for i in range(num_workers)
    ]
    info = {
        "holders": [h.pid for h in net.holders],
        "inodes": [h.net_inode for h in net.holders],
        "sleepers": [p.pid for p in sleepers],
    }
    print(json.dumps(info), flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
