"""The nfnetlink_queue protocol as nfqueue.py writes and reads it, and the delay line's
schedule (delayline.Schedule): pure, no socket, so these run anywhere.

The kernel's side is mirrored from linux/netfilter/nfnetlink_queue.h: a packet message is a
netlink header, an nfgenmsg and attributes; what it does not mirror is the kernel's timing,
which test_delayline.py measures on real queues."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from runner.backends.local import nfqueue
from runner.backends.local.delayline import Schedule, budget_bytes
from runner.backends.local.nfqueue import Packet
from runner.job.link import parse_link

QUEUE_PACKET = nfqueue.NFNL_SUBSYS_QUEUE << 8 | nfqueue.NFQNL_MSG_PACKET


def kernel_packet(packet_id: int, length: int | None) -> bytes:
    """A NFQNL_MSG_PACKET as the kernel sends it (packet header, then the copied bytes'
    original length when it copied fewer, then the first bytes)."""
    attrs = nfqueue.attr(nfqueue.NFQA_PACKET_HDR, struct.pack("!IHB", packet_id, 0x0800, 3))
    if length is not None:
        attrs += nfqueue.attr(nfqueue.NFQA_CAP_LEN, struct.pack("!I", length))
    attrs += nfqueue.attr(10, b"\x45" + bytes(19))  # NFQA_PAYLOAD: the IPv4 header copied
    return nfqueue.message(nfqueue.NFQNL_MSG_PACKET, 0, attrs)


def test_binding_asks_for_ipv4_headers_only_a_bound_and_whole_gso_packets() -> None:
    bind, params = (list(nfqueue.parse(m)) for m in nfqueue.bind_messages(7, 4096))
    config = nfqueue.NFNL_SUBSYS_QUEUE << 8 | nfqueue.NFQNL_MSG_CONFIG
    assert [t for t, _ in bind + params] == [config, config]
    assert struct.unpack("!H", bind[0][1][2:4]) == (7,)  # the queue, in nfgenmsg's res_id
    command = nfqueue.attributes(bind[0][1])[nfqueue.NFQA_CFG_CMD]
    assert struct.unpack("!BxH", command) == (nfqueue.NFQNL_CFG_CMD_BIND, socket.AF_INET)
    found = nfqueue.attributes(params[0][1])
    assert struct.unpack("!IB", found[nfqueue.NFQA_CFG_PARAMS]) == (20, nfqueue.NFQNL_COPY_PACKET)
    assert struct.unpack("!I", found[nfqueue.NFQA_CFG_QUEUE_MAXLEN]) == (4096,)
    assert struct.unpack("!I", found[nfqueue.NFQA_CFG_FLAGS]) == (nfqueue.NFQA_CFG_F_GSO,)


def test_a_batch_verdict_names_the_last_packet_it_releases() -> None:
    [(msg_type, body)] = nfqueue.parse(nfqueue.verdict_message(0, 41, nfqueue.NF_ACCEPT, True))
    assert msg_type == nfqueue.NFNL_SUBSYS_QUEUE << 8 | nfqueue.NFQNL_MSG_VERDICT_BATCH
    verdict = nfqueue.attributes(body)[nfqueue.NFQA_VERDICT_HDR]
    assert struct.unpack("!II", verdict) == (nfqueue.NF_ACCEPT, 41)


def test_packets_are_read_with_their_id_and_length_in_order() -> None:
    data = kernel_packet(5, 1514) + kernel_packet(6, 65226) + kernel_packet(7, None)
    found = [nfqueue.packet(body) for t, body in nfqueue.parse(data) if t == QUEUE_PACKET]
    assert found == [Packet(5, 1514), Packet(6, 65226), Packet(7, 0)]


@pytest.mark.parametrize("cut", [1, 15, 17, 30, 47])
def test_a_truncated_or_damaged_message_ends_the_walk_without_an_error(cut: int) -> None:
    data = kernel_packet(1, 100) + kernel_packet(2, 100)
    whole = len(kernel_packet(1, 100))
    assert len(list(nfqueue.parse(data[: whole + cut]))) == 1
    bogus = struct.pack("=IHHII", 3, QUEUE_PACKET, 0, 0, 0)  # a length shorter than a header
    assert list(nfqueue.parse(bogus + data)) == []
    assert nfqueue.packet(b"\0\0\0\0" + nfqueue.attr(1, b"\1")) is None  # a header too short


def test_releases_keep_the_order_of_arrival_whatever_the_jitter() -> None:
    schedule = Schedule(0.005, 0.005, 0.0, 1 << 30, rng=random.Random(1))
    for i in range(2000):
        assert schedule.arrive(Packet(i, 100), now_s=i * 1e-4)
    releases = [r for r, _, _ in schedule.held]
    assert releases == sorted(releases)
    waits = [r - i * 1e-4 for i, r in enumerate(releases)]
    assert min(waits) >= 0 and max(waits) <= 0.010 + 1e-9
    # One batch verdict for the first thousand, and those held behind them to the same time.
    last = schedule.due(releases[999])
    assert last is not None and releases[last] == releases[999] < releases[last + 1]
    assert schedule.tally().released == last + 1 and schedule.next_release_s() == releases[last + 1]


def test_loss_drops_its_share_and_counts_it() -> None:
    schedule = Schedule(0.001, 0.0, 0.1, 1 << 30, rng=random.Random(2))
    held = sum(schedule.arrive(Packet(i, 100), now_s=0.0) for i in range(10_000))
    tally = schedule.tally()
    assert tally.lost == 10_000 - held and 900 <= tally.lost <= 1100


def test_a_full_line_drops_and_counts_what_it_cannot_hold_then_takes_more_once_released() -> None:
    schedule = Schedule(0.001, 0.0, 0.0, budget_bytes=3000)
    assert [schedule.arrive(Packet(i, 1000), now_s=0.0) for i in range(5)] == [
        True, True, True, False, False
    ]  # fmt: skip
    assert schedule.tally().full == 2 and schedule.tally().max_held_bytes == 3000
    assert schedule.due(0.001) == 2
    assert schedule.arrive(Packet(5, 1000), now_s=0.001)


def test_a_line_holds_twice_its_delay_of_traffic_and_the_shaper_queue() -> None:
    assert budget_bytes(parse_link("1gbit,delay=20ms")) == 2 * 2_500_000 + 2_500_000
    assert budget_bytes(parse_link("1mbit,delay=1ms")) == 4 << 20
