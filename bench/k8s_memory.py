"""Peak memory of the runner reading what a cluster sends, by size: a pod log fetched into a run
directory (read line by line, split into its ranks' files on disk) and an API answer (a list,
refused as it comes once past `STACKBENCH_K8S_MAX_ANSWER_MIB`), from 10 MB to 1 GB each.

A speed benchmark of our own code (not a pass/fail test). Each size runs in a fresh Python
process (so that its peak is its own) that talks to a real socket server on 127.0.0.1 streaming
the bytes from a generator (tests/runner/k8s_socket.py), through the same client the runner
uses (runner/backends/kubernetes/api/client.py). `python bench/k8s_memory.py` prints one row per
kind and size: peak RSS should stay flat as the size grows a hundredfold.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIZES_MB = (10, 100, 1000)
LINE = b"[rank0]:" + b"x" * 119 + b"\n"  # 128 bytes, as a chatty training loop prints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default=",".join(map(str, SIZES_MB)))
    parser.add_argument("--one", nargs=2, metavar=("KIND", "MB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]))))
        return
    print(f"{'kind':<8}{'size_MB':>9}{'read_MB':>9}{'peak_RSS_MB':>13}{'seconds':>9}")
    for kind, mb in itertools.product(("log", "answer"), map(int, args.sizes_mb.split(","))):
        out = subprocess.run([sys.executable, __file__, "--one", kind, str(mb)],
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
        row = json.loads(out.splitlines()[-1])
        print(f"{kind:<8}{mb:>9}{row['read_mb']:>9.0f}{row['peak_mb']:>13.0f}"
              f"{row['seconds']:>9.1f}", flush=True)  # fmt: skip


def measure(kind: str, mb: int) -> dict[str, float]:
    import resource

    from runner.backends.kubernetes.api.client import KubeApi, Selector
    from runner.backends.kubernetes.api.limits import ApiLimits
    from runner.backends.kubernetes.spool import Spool
    from runner.errors import RunnerError
    from tests.runner.k8s_helpers import stack_connection
    from tests.runner.k8s_socket import RawServer, head, send_chunked

    total = mb * 1_000_000

    def pieces() -> Iterator[bytes]:
        if kind == "log":
            yield from itertools.repeat(LINE * 512, total // (len(LINE) * 512))
            return
        item = b'{"metadata": {"name": "p"}},'  # a list of pods, as long as it takes
        yield b'{"metadata": {}, "items": ['
        yield from itertools.repeat(item * 4096, total // (len(item) * 4096))
        yield b'{"metadata": {"name": "p"}}]}'

    def answer(request: object, conn: socket.socket) -> None:
        conn.sendall(head("200 OK", chunked=True))
        with contextlib.suppress(OSError):  # refused past the cap: the client hung up
            send_chunked(conn, pieces())

    server = RawServer(answer)
    conn = stack_connection("trainjob", None, kubeconfig=server.kubeconfig())
    api = KubeApi(conn, limits=ApiLimits(max_log_bytes=2 << 30, log_deadline_s=3600))
    start, read_bytes = time.monotonic(), 0
    if kind == "log":
        with tempfile.TemporaryDirectory() as tmp, Spool() as out:
            for line in api.read_log("pod-0", "node").lines():
                out.write(Path(tmp) / "rank-0.log", line)
                read_bytes += len(line) + 1
    else:
        try:
            api.list_objects("pods", Selector())
            read_bytes = total
        except RunnerError as err:  # past the cap; or under it, items that are no pods
            read_bytes = min(total, api.limits.max_answer_bytes)
            print(str(err)[:100], file=sys.stderr)
    seconds = time.monotonic() - start
    api.close()
    server.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"read_mb": read_bytes / 1e6, "peak_mb": peak_mb, "seconds": seconds}


if __name__ == "__main__":
    main()
