"""The kernel's packet queue (nfnetlink_queue) spoken over a raw netlink socket: bind a queue,
read the packets an iptables `-j NFQUEUE` rule hands it, and give each its verdict.

    with QueueSocket.bind(queue_num=0, max_packets=4096) as queue:   # in the rule's namespace
        for packet in queue.read():        # Packet(packet_id, length_bytes), in arrival order
            ...
        queue.accept_through(packet_id)    # every packet up to this id leaves (VERDICT_BATCH)
        queue.drop(packet_id)              # this one does not

No extra package: the protocol is a 16-byte netlink header, a 4-byte nfnetlink header whose
res_id is the queue number, then type-length-value attributes (linux/netfilter/
nfnetlink_queue.h). The queue copies each packet's first COPY_BYTES only (its length comes
with them; the payload never crosses into this process) and takes GSO packets whole
(NFQA_CFG_F_GSO), so a 64 KiB TCP segment is one verdict, not 44. Fail-open is off: a packet
the queue cannot hold, or one queued while no socket is bound, is dropped, never sent unshaped.

A netlink socket belongs to the network namespace it was created in; the caller creates this
one inside the worker's (namespaces.in_namespace).

Not here: when a packet leaves (delayline.py), the iptables rule (network.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

NETLINK_NETFILTER = 12  # linux/netlink.h
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33  # asm-generic/socket.h: root may exceed rmem_max
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_PACKET = 2
# Copy this much of each packet: its IPv4 header. The kernel says a packet's length
# (NFQA_CAP_LEN) only when it copies less than all of it, and copying none (NFQNL_COPY_META)
# tells no length at all.
COPY_BYTES = 20
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CAP_LEN = 13
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_GSO = 4
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED and NLA_F_NET_BYTEORDER
NF_DROP = 0
NF_ACCEPT = 1
NFNETLINK_V0 = 0

HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, portid (host order)
NFGEN = struct.Struct("!BBH")  # nfgenmsg: family, version, res_id (the queue, big-endian)
ATTR = struct.Struct("=HH")  # nlattr: length, type
RECV_BYTES = 1 << 16
SOCKET_BUFFER_BYTES = 8 << 20  # a burst of verdict-waiting metadata, never the packets


class QueueError(OSError):
    """The kernel refused the queue (bound by another reader, no permission)."""


@dataclass(frozen=True)
class Packet:
    packet_id: int
    length_bytes: int


def message(msg_type: int, queue_num: int, attrs: bytes, seq: int = 0, ack: bool = False) -> bytes:
    """One nfnetlink message of the queue subsystem for queue `queue_num`."""
    body = NFGEN.pack(socket.AF_UNSPEC, NFNETLINK_V0, queue_num) + attrs
    flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
    kind = NFNL_SUBSYS_QUEUE << 8 | msg_type
    return HEADER.pack(HEADER.size + len(body), kind, flags, seq, 0) + body


def attr(attr_type: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes as netlink aligns them."""
    size = ATTR.size + len(payload)
    return ATTR.pack(size, attr_type) + payload + b"\0" * (-size % 4)


def bind_messages(queue_num: int, max_packets: int) -> list[bytes]:
    """Bind the queue (IPv4), copy headers only, hold at most `max_packets`, take GSO whole."""
    return [
        message(NFQNL_MSG_CONFIG, queue_num, attr(NFQA_CFG_CMD, struct.pack("!BxH",
                NFQNL_CFG_CMD_BIND, socket.AF_INET)), seq=1, ack=True),
        message(NFQNL_MSG_CONFIG, queue_num,
                attr(NFQA_CFG_PARAMS, struct.pack("!IB", COPY_BYTES, NFQNL_COPY_PACKET))
                + attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", max_packets))
                + attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO))
                + attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO)), seq=2, ack=True),
    ]  # fmt: skip


def verdict_message(queue_num: int, packet_id: int, verdict: int, batch: bool) -> bytes:
    """The verdict for `packet_id` (batch: for every queued packet up to and including it)."""
    kind = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
    return message(kind, queue_num, attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id)))


def parse(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, body) of each netlink message in `data`; a truncated tail ends the walk."""
    offset = 0
    while offset + HEADER.size <= len(data):
        length, msg_type, _flags, _seq, _pid = HEADER.unpack_from(data, offset)
        if length < HEADER.size or offset + length > len(data):
            return
        yield msg_type, data[offset + HEADER.size : offset + length]
        offset += (length + 3) & ~3


def attributes(body: bytes) -> dict[int, bytes]:
    """The attributes after the nfgenmsg header of a queue message, by type."""
    found: dict[int, bytes] = {}
    offset = NFGEN.size
    while offset + ATTR.size <= len(body):
        length, attr_type = ATTR.unpack_from(body, offset)
        if length < ATTR.size or offset + length > len(body):
            break
        found[attr_type & NLA_TYPE_MASK] = body[offset + ATTR.size : offset + length]
        offset += (length + 3) & ~3
    return found


def packet(body: bytes) -> Packet | None:
    """The packet a NFQNL_MSG_PACKET announces; None when it carries no packet header."""
    found = attributes(body)
    header = found.get(NFQA_PACKET_HDR)
    if header is None or len(header) < 4:
        return None
    (packet_id,) = struct.unpack_from("!I", header)
    cap = found.get(NFQA_CAP_LEN)
    length = struct.unpack_from("!I", cap)[0] if cap is not None and len(cap) >= 4 else 0
    return Packet(packet_id, length)


def error_code(body: bytes) -> int:
    """The (negative) errno of an NLMSG_ERROR message; 0 is an acknowledgement."""
    return struct.unpack_from("=i", body)[0] if len(body) >= 4 else -errno.EPROTO


class QueueSocket:
    """A bound queue: the packets it reads, the verdicts it sends. Not thread-safe: one
    reader per queue (a delay line's thread)."""

    def __init__(self, sock: socket.socket, queue_num: int) -> None:
        self._sock = sock
        self.queue_num = queue_num

    @classmethod
    def bind(cls, queue_num: int, max_packets: int) -> QueueSocket:
        """Bind `queue_num` in the calling thread's network namespace; QueueError when the
        kernel refuses (another reader has it, or no CAP_NET_ADMIN)."""
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            sock.bind((0, 0))
            with contextlib.suppress(OSError):  # not root: the default buffer, ENOBUFS counted
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, SOCKET_BUFFER_BYTES)
            sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            for request in bind_messages(queue_num, max_packets):
                sock.send(request)
                _await_ack(sock)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return cls(sock, queue_num)

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self) -> list[Packet]:
        """The packets queued since the last read (none when nothing is waiting)."""
        packets: list[Packet] = []
        while True:
            try:
                data = self._sock.recv(RECV_BYTES)
            except BlockingIOError:
                return packets
            for msg_type, body in parse(data):
                if msg_type == NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET:
                    found = packet(body)
                    if found is not None:
                        packets.append(found)

    def accept_through(self, packet_id: int) -> None:
        self._send(verdict_message(self.queue_num, packet_id, NF_ACCEPT, batch=True))

    def drop(self, packet_id: int) -> None:
        self._send(verdict_message(self.queue_num, packet_id, NF_DROP, batch=False))

    def _send(self, data: bytes) -> None:
        # A verdict is a few dozen bytes to the kernel, which takes it at once; should the
        # socket ever be full, waiting for room is right (the packets wait with it).
        self._sock.setblocking(True)
        try:
            self._sock.send(data)
        finally:
            self._sock.setblocking(False)

    def close(self) -> None:
        """Unbinds the queue; the kernel drops what it still held (fail-open is off)."""
        self._sock.close()

    def __enter__(self) -> QueueSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _await_ack(sock: socket.socket) -> None:
    data = sock.recv(RECV_BYTES)
    for msg_type, body in parse(data):
        if msg_type == NLMSG_ERROR:
            code = error_code(body)
            if code != 0:
                raise QueueError(-code, f"the kernel refused the queue: {os.strerror(-code)}")
            return
    raise QueueError(errno.EPROTO, "the kernel did not acknowledge the queue's configuration")
