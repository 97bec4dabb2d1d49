"""The link as it is, measured in about a second before the workers start: payload rate and
round-trip time between worker 0 and worker 1, for the `network` entry of manifest.json, and
the check that the link has the delay it was asked for.

Both ends run in the owner's process: a socket belongs to the network namespace it was created
in, so each one is created by a short-lived thread that first moves itself (only itself:
setns acts per thread) into the worker's namespace (namespaces.in_namespace). Nothing is
started inside the namespaces.

- Round trip: 20 one-byte TCP exchanges (Nagle off) on the idle link; the median. tbf lets a
  packet through at once while its bucket holds tokens, so without a delay this is the link's
  round trip without load; with one, twice the delay (once each way) plus that.
- Rate: one TCP stream from worker 0 to worker 1 sends as fast as it can; the receiver counts
  payload bytes for WINDOW_S after a warm-up (WARMUP_S, plus SLOW_START_ROUND_TRIPS round
  trips of the asked delay: slow start and the bucket's initial burst fall in the warm-up).
  Both ends at a real-time priority where allowed (realtime.py), for about a second: with
  other work on both cores of a 2-core machine, a 400mbit link measured 130 Mbit/s at normal
  priority, the rate of the probe's share of the CPU, not of the link.
  Payload only: TCP/IP and Ethernet headers take about 4 % of a full frame, so a 100mbit link
  measures about 95-96 Mbit/s.

Not here: the record's shape (contract/network.py), the link itself (network.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from contract.network import NetworkRecord
from runner.backends.local import realtime
from runner.backends.local.namespaces import NamespaceError, in_namespace
from runner.job.link import Link

PORT = 5201  # the workers' namespaces are empty: no port can be taken there
ROUND_TRIPS = 20
WARMUP_S = 0.15
# Slow start doubles the window each round trip: from 10 segments to a 1gbit link's 5 MB
# bandwidth-delay product at 20 ms each way takes about 9; a few more settle it.
SLOW_START_ROUND_TRIPS = 12
WINDOW_S = 0.5
CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 5.0  # no byte for this long: the link is broken
CHUNK_BYTES = 64 << 10
# Payload is about 95 % of a shaped rate; a link measured below this share of it was limited
# by something else (the machine: one core moves a few Gbit/s through a veth pair).
LIMITED_SHARE = 0.8
# The bar for a delay as asked: a round trip within 10 % of twice the delay, or
# within half a millisecond of it where 10 % is less (the machine's own round trip and timer
# slack are tens of microseconds).
RTT_TOLERANCE_SHARE = 0.10
RTT_TOLERANCE_MS = 0.5


class ProbeError(RuntimeError):
    """The link could not be measured (it carried nothing, or a namespace was gone), or it
    measured other than asked; one line."""


@dataclass(frozen=True)
class Measurement:
    payload_mbit_s: float
    rtt_ms: float


def describe(link: Link, num_workers: int, impairment: str) -> str:
    """The record's description of a shaped network: rate, and how delay and loss are made
    (`impairment`: "" when the link asks for neither)."""
    text = (
        f"{link.text} per worker, each direction (tbf on both ends of a veth pair), "
        f"{num_workers} workers in network namespaces of their own on one bridge"
    )
    return text + (f"; {impairment}" if impairment else "")


def unmeasured(link: Link, description: str) -> NetworkRecord:
    """The record of a shaped network with one worker: no link is crossed."""
    return NetworkRecord(
        description=description, link=link.text, asked_mbit_s=link.rate_mbit_s,
        latency=latency(link), asked_rtt_ms=link.added_round_trip_ms,
        asked_loss_percent=link.loss_percent,
        method="not measured: one worker, no link is crossed",
    )  # fmt: skip


def record(
    link: Link, description: str, found: Measurement, base_rtt_ms: float | None = None
) -> NetworkRecord:
    """The manifest's `network` entry for a link measured as `found` (and with its delay off,
    `base_rtt_ms`): asked and measured."""
    return dataclasses.replace(
        unmeasured(link, description + _limited(found.payload_mbit_s, link.rate_mbit_s)),
        measured_mbit_s=round(found.payload_mbit_s, 2),
        rtt_ms=round(found.rtt_ms, 3),
        base_rtt_ms=None if base_rtt_ms is None else round(base_rtt_ms, 3),
        method=(
            f"TCP payload rate of one stream worker 0 -> worker 1 over {WINDOW_S} s after "
            f"{warmup_s(link):.2f} s of warm-up; round trip: median of {ROUND_TRIPS} one-byte "
            "exchanges on the idle link, before loss is switched on (base_rtt_ms: the same "
            "with the delay off)"
        ),
    )


def latency(link: Link) -> str:
    """The record's `latency` field: what the link adds, or that nothing is emulated."""
    if not link.delay_us:
        return "not emulated"
    jitter = f" +- {link.jitter_ms:g} ms, in order" if link.jitter_us else ""
    return f"{link.delay_ms:g} ms one way{jitter}"


def round_trip_problem(link: Link, rtt_ms: float, base_rtt_ms: float) -> str | None:
    """Why a round trip measured with the delay (`rtt_ms`) and without it (`base_rtt_ms`) is
    not the link asked for, in one line; None when it is."""
    asked_ms = link.added_round_trip_ms
    tolerance_ms = max(RTT_TOLERANCE_SHARE * asked_ms, RTT_TOLERANCE_MS)
    added_ms = rtt_ms - base_rtt_ms
    if abs(added_ms - asked_ms) <= tolerance_ms:
        return None
    return (
        f"the link's delay added {added_ms:.3f} ms to a round trip ({base_rtt_ms:.3f} -> "
        f"{rtt_ms:.3f} ms), not the {asked_ms:g} ms that delay={link.delay_ms:g}ms each way "
        f"asks for (+- {tolerance_ms:.2g} ms): this machine "
        "cannot give that delay now (a busy CPU delays the delay line's timers); try again "
        "on an idle machine, or a larger delay"
    )


def warmup_s(link: Link) -> float:
    return WARMUP_S + SLOW_START_ROUND_TRIPS * (link.added_round_trip_ms + link.jitter_ms) / 1e3


def _limited(measured_mbit_s: float, asked_mbit_s: float) -> str:
    """What the description adds when the link carried far less than its rate: the record
    names the link as asked, and a faster one asked for than the machine can carry is not it."""
    if measured_mbit_s >= LIMITED_SHARE * asked_mbit_s:
        return ""
    return (
        f"; measured {measured_mbit_s:.4g} Mbit/s, under {LIMITED_SHARE:.0%} of the rate: "
        "something other than the shaper (this machine) limited the link"
    )


def measure(
    sender_ns: str, receiver_ns: str, receiver_addr: str, warmup_s: float = WARMUP_S
) -> Measurement:
    """Round trip, then payload rate, from the namespace at `sender_ns` (a /proc/<pid>/ns/net
    path) to `receiver_addr` in the one at `receiver_ns`."""
    try:
        return _measure(sender_ns, receiver_ns, receiver_addr, warmup_s)
    except (OSError, NamespaceError) as err:  # refused, unreachable, timed out
        raise ProbeError(f"cannot measure the link to {receiver_addr}: {err}") from err


def round_trip_only(sender_ns: str, receiver_ns: str, receiver_addr: str) -> float:
    """The round trip alone (ms), as `measure` takes it."""
    try:
        with _connected(sender_ns, receiver_ns, receiver_addr) as (client, peer):
            return round_trip_ms(client, peer)
    except (OSError, NamespaceError) as err:
        raise ProbeError(f"cannot measure the link to {receiver_addr}: {err}") from err


def _measure(sender_ns: str, receiver_ns: str, receiver_addr: str, warmup_s: float) -> Measurement:
    with _connected(sender_ns, receiver_ns, receiver_addr) as (client, peer):
        rtt_ms = round_trip_ms(client, peer)
        rate_mbit_s = payload_rate_mbit_s(client, peer, warmup_s)
        return Measurement(payload_mbit_s=rate_mbit_s, rtt_ms=rtt_ms)


@contextlib.contextmanager
def _connected(
    sender_ns: str, receiver_ns: str, receiver_addr: str
) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP connection (Nagle off) from the sender's namespace to the receiver's: (the
    sender's end, the receiver's)."""
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
        yield client, peer


def round_trip_ms(client: socket.socket, peer: socket.socket) -> float:
    """The median of ROUND_TRIPS exchanges, this thread at a real-time priority where allowed
    (realtime.py): the round trip of the link, not of the machine's run queue."""
    with realtime.preferred():
        return _round_trip_ms(client, peer)


def _round_trip_ms(client: socket.socket, peer: socket.socket) -> float:
    times_s = []
    for _ in range(ROUND_TRIPS):
        start = time.perf_counter()
        client.sendall(b"p")
        _recv_exactly(peer, 1)
        peer.sendall(b"q")
        _recv_exactly(client, 1)
        times_s.append(time.perf_counter() - start)
    return statistics.median(times_s) * 1e3


def payload_rate_mbit_s(
    client: socket.socket, peer: socket.socket, warmup_s: float = WARMUP_S
) -> float:
    """Bytes the receiver got after its first read past `warmup_s`, up to and including its
    first read WINDOW_S later, over the time between those two reads.

    What the first read returns arrived before the window opened, so it is not counted: on a
    slow link a window holds a few packets, and counting one more made a 100kbit link measure
    0.12-0.14 Mbit/s of payload, more than the link can carry."""
    stop = threading.Event()
    sender = threading.Thread(target=_send_until, args=(client, stop), daemon=True)
    with realtime.preferred():
        sender.start()
        return _receive(client, peer, warmup_s, stop, sender)


def _receive(
    client: socket.socket,
    peer: socket.socket,
    warmup_s: float,
    stop: threading.Event,
    sender: threading.Thread,
) -> float:
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
                if now - start >= warmup_s:
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


def _send_until(sock: socket.socket, stop: threading.Event) -> None:
    chunk = bytes(CHUNK_BYTES)
    with realtime.preferred(), contextlib.suppress(OSError):  # the receiver's shutdown ends it
        while not stop.is_set():
            sock.sendall(chunk)


def _recv_exactly(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        n = len(sock.recv(size - got))
        if n == 0:
            raise ProbeError("the probe's peer closed the connection")
        got += n
