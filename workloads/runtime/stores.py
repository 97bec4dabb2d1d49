"""A c10d TCPStore server that listens on one address only, never on every interface.

torch's TCPStore server ignores the host it is given: it binds the IPv6 wildcard `::` (which
takes IPv4 too), else 0.0.0.0, so a store created for 127.0.0.1 answers anyone who reaches
the machine (checked with torch 2.13: `TCPStore("127.0.0.1", 0, is_master=True)` listens on
`:::PORT`). It takes a socket already bound instead (`master_listen_fd`, torch >= 2.4), and then
listens on that: here it is bound to the address the store's clients are told. An address
given as a name (a cluster's service name) is left to torch: which of the machine's
addresses a name stands for is the cluster's business (runner/backends/kubernetes/).
Not here: who hosts the store (workloads/runtime/dist.py for a fixed group, the elastic launch).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket

from torch.distributed import TCPStore

LOOPBACK_NAMES = {"localhost": "127.0.0.1"}


def bindable(host: str) -> str | None:
    """The address to bind for a store whose clients are told `host`: an IP address as it is
    ("localhost" as 127.0.0.1); None for any other name."""
    host = LOOPBACK_NAMES.get(host, host)
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def bound_socket(address: str, port: int) -> int:
    """The descriptor of a TCP socket bound to address:port (not yet listening: the store
    listens on it); OSError when it cannot be bound (the port taken, the address not ours)."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As torch's own server does: a port just released (TIME_WAIT) binds again.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except OSError:
        sock.close()
        raise
    return sock.detach()


def serve(
    host: str,
    port: int,
    timeout_s: float,
    world_size: int | None = None,
    wait_for_workers: bool = False,
) -> TCPStore:
    """The store's server (and its own client) for clients told host:port, listening on that
    address alone when `host` is an address (`bindable`); on torch's choice otherwise. It
    stops listening when the returned store is deleted. OSError / RuntimeError when it
    cannot listen."""
    timeout = datetime.timedelta(seconds=timeout_s)
    address = bindable(host)
    if address is None:
        return TCPStore(host, port, world_size, is_master=True, timeout=timeout,
                        wait_for_workers=wait_for_workers)  # fmt: skip
    # Torch owns the descriptor from here on, and closes it with its server; if the server
    # fails to start, whether it was closed is not said, so it is left to the process's end
    # (closing it here could close a descriptor another thread was just given).
    return TCPStore(address, port, world_size, is_master=True, timeout=timeout,
                    wait_for_workers=wait_for_workers,
                    master_listen_fd=bound_socket(address, port))  # fmt: skip
