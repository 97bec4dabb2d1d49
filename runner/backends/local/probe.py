"""The link as it is, measured in under a second before the workers start: payload rate and
round-trip time between worker 0 and worker 1, for the `network` entry of manifest.json.

Both ends run in the owner's process: a socket belongs to the network namespace it was created
in, so each one is created by a short-lived thread that first moves itself (only itself:
setns acts per thread) into the worker's namespace. Nothing is started inside the namespaces.

- Round trip: 20 one-byte TCP exchanges (Nagle off) on the idle link; the median. tbf lets a
  packet through at once while its bucket holds tokens, so this is the link's round trip
  without load, not a propagation delay (none is emulated).
- Rate: one TCP stream from worker 0 to worker 1 sends as fast as it can; the receiver counts
  payload bytes for WINDOW_S after WARMUP_S (slow start and the bucket's initial burst fall in
  the warm-up). Payload only: TCP/IP and Ethernet headers take about 4 % of a full frame, so
  a 100mbit link measures about 95-96 Mbit/s.

Not here: the record's shape (contract/network.py), the link itself (network.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from contract.network import NetworkRecord

if TYPE_CHECKING:
    from runner.backends.local.network import ShapedNetwork

T = TypeVar("T")
CLONE_NEWNET = 0x40000000  # linux/sched.h
PORT = 5201  # the workers' namespaces are empty: no port can be taken there
ROUND_TRIPS = 20
WARMUP_S = 0.15
WINDOW_S = 0.5
CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 5.0  # no byte for this long: the link is broken
CHUNK_BYTES = 64 << 10
# Payload is about 95 % of a shaped rate; a link measured below this share of it was limited
# by something else (the machine: one core moves a few Gbit/s through a veth pair).
LIMITED_SHARE = 0.8


class ProbeError(RuntimeError):
    """The link could not be measured (it carried nothing, or a namespace was gone)."""


@dataclass(frozen=True)
class Measurement:
    payload_mbit_s: float
    rtt_ms: float


def record(net: ShapedNetwork) -> NetworkRecord:
    """The manifest's `network` entry for `net`, measured now when it has two workers."""
    from runner.backends.local import network  # the caller has it loaded already

    link = net.link
    description = (
        f"{link.text} per worker, each direction (tbf on both ends of a veth pair), "
        f"{net.num_workers} workers in network namespaces of their own on one bridge"
    )
    base = NetworkRecord(description=description, link=link.text, asked_mbit_s=link.rate_mbit_s)
    if net.num_workers < 2:
        return dataclasses.replace(base, method="not measured: one worker, no link is crossed")
    sender, receiver = net.worker(0), net.worker(1)
    found = measure(sender.ns_file("net"), receiver.ns_file("net"), network.address(1))
    return dataclasses.replace(
        base,
        description=description + _limited(found.payload_mbit_s, link.rate_mbit_s),
        measured_mbit_s=round(found.payload_mbit_s, 2),
        rtt_ms=round(found.rtt_ms, 3),
        method=(
            f"TCP payload rate of one stream worker 0 -> worker 1 over {WINDOW_S} s after "
            f"{WARMUP_S} s of warm-up; round trip: median of {ROUND_TRIPS} one-byte "
            "exchanges on the idle link"
        ),
    )


def _limited(measured_mbit_s: float, asked_mbit_s: float) -> str:
    """What the description adds when the link carried far less than its rate: the record
    names the link as asked, and a faster one asked for than the machine can carry is not it."""
    if measured_mbit_s >= LIMITED_SHARE * asked_mbit_s:
        return ""
    return (
        f"; measured {measured_mbit_s:.4g} Mbit/s, under {LIMITED_SHARE:.0%} of the rate: "
        "something other than the shaper (this machine) limited the link"
    )


def measure(sender_ns: str, receiver_ns: str, receiver_addr: str) -> Measurement:
    """Round trip, then payload rate, from the namespace at `sender_ns` (a /proc/<pid>/ns/net
    path) to `receiver_addr` in the one at `receiver_ns`."""
    try:
        return _measure(sender_ns, receiver_ns, receiver_addr)
    except OSError as err:  # refused, unreachable, timed out
        raise ProbeError(f"cannot measure the link to {receiver_addr}: {err}") from err


def _measure(sender_ns: str, receiver_ns: str, receiver_addr: str) -> Measurement:
    server = in_namespace(receiver_ns, lambda: socket.create_server((receiver_addr, PORT)))
    with contextlib.ExitStack() as stack:
        stack.enter_context(server)
        client = stack.enter_context(in_namespace(sender_ns, socket.socket))
        client.settimeout(CONNECT_TIMEOUT_S)
        server.settimeout(CONNECT_TIMEOUT_S)
        client.connect((receiver_addr, PORT))
        peer = stack.enter_context(server.accept()[0])
        for sock in (client, peer):
            sock.settimeout(IO_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtt_ms = round_trip_ms(client, peer)
        return Measurement(payload_mbit_s=payload_rate_mbit_s(client, peer), rtt_ms=rtt_ms)


def round_trip_ms(client: socket.socket, peer: socket.socket) -> float:
    times_s = []
    for _ in range(ROUND_TRIPS):
        start = time.perf_counter()
        client.sendall(b"p")
        _recv_exactly(peer, 1)
        peer.sendall(b"q")
        _recv_exactly(client, 1)
        times_s.append(time.perf_counter() - start)
    return statistics.median(times_s) * 1e3


def payload_rate_mbit_s(client: socket.socket, peer: socket.socket) -> float:
    """Bytes the receiver got after its first read past WARMUP_S, up to and including its
    first read WINDOW_S later, over the time between those two reads.

    What the first read returns arrived before the window opened, so it is not counted: on a
    slow link a window holds a few packets, and counting one more made a 100kbit link measure
    0.12-0.14 Mbit/s of payload, more than the link can carry."""
    stop = threading.Event()
    sender = threading.Thread(target=_send_until, args=(client, stop), daemon=True)
    sender.start()
    buffer = bytearray(1 << 20)
    received = 0
    start = time.perf_counter()
    mark: tuple[float, int] | None = None
    try:
        while True:
            got = peer.recv_into(buffer)
            now = time.perf_counter()
            if got == 0:
                raise ProbeError("the probe's sender closed early")
            received += got
            if mark is None:
                if now - start >= WARMUP_S:
                    mark = (now, received)
            elif now - mark[0] >= WINDOW_S:  # never an empty window, however late the mark
                break
    except TimeoutError:
        raise ProbeError(f"nothing crossed the link for {IO_TIMEOUT_S:.0f} s") from None
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)  # unblocks the sender
        sender.join()
    assert mark is not None
    seconds = now - mark[0]
    return (received - mark[1]) * 8 / seconds / 1e6


def in_namespace(ns_file: str, make: Callable[[], T]) -> T:
    """make() called on a thread that has first entered the network namespace at ns_file."""
    outcome: dict[str, object] = {}

    def enter_and_make() -> None:
        try:
            fd = os.open(ns_file, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            outcome["value"] = make()
        except OSError as err:
            outcome["error"] = err

    thread = threading.Thread(target=enter_and_make)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise ProbeError(f"cannot open a socket in {ns_file}: {outcome['error']}")
    return outcome["value"]  # type: ignore[return-value]


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def _send_until(sock: socket.socket, stop: threading.Event) -> None:
    chunk = bytes(CHUNK_BYTES)
    with contextlib.suppress(OSError):  # the receiver's shutdown ends the stream
        while not stop.is_set():
            sock.sendall(chunk)


def _recv_exactly(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        n = len(sock.recv(size - got))
        if n == 0:
            raise ProbeError("the probe's peer closed the connection")
        got += n
