"""Delay, jitter and loss on real shaped links (the NFQUEUE delay line on this kernel, netem
where the kernel has it): the round trip the probe measures, order kept under jitter, loss
counted, a dead reader named, and nothing left behind, a SIGKILLed owner included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runner.backends.local import impair, network_check
from runner.backends.local.namespaces import in_namespace
from runner.backends.local.network import ShapedNetwork, address
from runner.backends.local.probe import ProbeError
from runner.job.link import parse_link
from tests.runner.network import namespace_scan as scan

REPO = Path(__file__).resolve().parents[3]
PORT = 6000


pytestmark = pytest.mark.usefixtures("delaying")


def udp_pair(net: ShapedNetwork) -> tuple[socket.socket, socket.socket]:
    """A UDP sender in worker 0's namespace and a receiver in worker 1's."""
    receiver = in_namespace(net.worker(1).ns_file("net"),
                            lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))  # fmt: skip
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # every datagram, unread
    receiver.bind((address(1), PORT))
    receiver.settimeout(5)
    sender = in_namespace(net.worker(0).ns_file("net"),
                          lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))  # fmt: skip
    return sender, receiver


def test_the_probe_measures_twice_the_delay_and_the_record_says_asked_and_measured() -> None:
    # 10 ms, whose bar (2 ms) a busy CPU's timer lateness (+1.2 ms in a CI run) stays within.
    with ShapedNetwork.open(parse_link("100mbit,delay=10ms"), num_workers=2) as net:
        record = net.probe()
    assert record.asked_rtt_ms == 20.0 and record.latency == "10 ms one way"
    assert record.rtt_ms is not None and record.base_rtt_ms is not None
    assert 18 <= record.rtt_ms - record.base_rtt_ms <= 22  # the probe's own bar
    assert record.measured_mbit_s is not None and record.measured_mbit_s > 50
    if impair.impairment(parse_link("100mbit,delay=10ms")) == impair.DELAY_LINE:
        assert "NFQUEUE delay line" in record.description


def test_jitter_spreads_the_delay_but_never_reorders() -> None:
    with ShapedNetwork.open(parse_link("100mbit,delay=2ms,jitter=2ms"), num_workers=2) as net:
        sender, receiver = udp_pair(net)
        with sender, receiver:
            for i in range(300):
                sender.sendto(i.to_bytes(4, "big"), (address(1), PORT))
                time.sleep(0.0002)  # packets 0.2 ms apart: a 4 ms spread would reorder them
            got = [int.from_bytes(receiver.recv(16), "big") for _ in range(300)]
    assert got == list(range(300))


def test_loss_is_switched_on_after_the_probe_and_counted_in_the_tally() -> None:
    # 10 ms: the probe must pass first, and its bar (10 %, at least 0.5 ms) on a 1 ms delay is
    # less than a busy CPU's timer lateness (+1.2 ms in a CI run).
    with ShapedNetwork.open(parse_link("100mbit,delay=10ms,loss=20%"), num_workers=2) as net:
        net.probe()
        before = net.tally()["links"][1]["delay_line"]
        assert before["lost"] == 0  # the probe crossed a lossless link
        sender, receiver = udp_pair(net)
        receiver.settimeout(0.5)
        with sender, receiver:
            for _ in range(1000):
                sender.sendto(b"x", (address(1), PORT))
            arrived = 0
            while True:
                try:
                    receiver.recv(16)
                except TimeoutError:
                    break
                arrived += 1
        tally = net.tally()["links"][1]["delay_line"]
    lost = tally["lost"] - before["lost"]
    assert lost + arrived == 1000 and 120 <= lost <= 280


def test_a_reader_that_dies_breaks_the_network_naming_it_and_its_link_carries_nothing() -> None:
    with ShapedNetwork.open(parse_link("100mbit,delay=1ms,jitter=1ms"), num_workers=2) as net:
        assert net.broken() is None
        line = net.lines[1]
        # Its socket replaced under it: its next read fails, as a reader's bug would end it,
        # and the kernel unbinds the queue.
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, line._queue.fileno())
        os.close(null)
        sender, receiver = udp_pair(net)
        receiver.settimeout(0.3)
        with sender, receiver:
            sender.sendto(b"wake", (address(1), PORT))  # what the reader wakes up to read
            assert scan.wait_until(lambda: not line.alive(), 5)
            assert (net.broken() or "").startswith(
                "the shaped network broke: worker 1's delay line stopped: "
            )
            sender.sendto(b"x", (address(1), PORT))
            with pytest.raises(TimeoutError):  # dropped: no reader, never sent undelayed
                while receiver.recv(16) != b"x":
                    pass


def test_a_round_trip_far_from_the_delay_fails_the_probe_in_one_line() -> None:
    with ShapedNetwork.open(parse_link("100mbit,delay=2ms"), num_workers=2) as net:
        for line in net.lines:
            line._delay = (0.010, 0.0)  # what a busy machine's late timers would add
        with pytest.raises(ProbeError) as caught:
            net.probe()
    said = str(caught.value)
    assert "\n" not in said
    assert said.startswith("the link's delay added ") and "not the 4 ms that delay=2ms" in said


def test_a_delay_line_without_iptables_is_refused_in_one_line_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    for tool in ("ip", "tc", "unshare", "nsenter", "sh", "cat"):
        (tmp_path / tool).symlink_to(shutil.which(tool) or tool)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert network_check.problem(parse_link("100mbit,delay=1ms,jitter=1ms")) == (
        "100mbit,delay=1ms,jitter=1ms needs netem (this kernel has none) or iptables for the "
        "NFQUEUE delay line: apt-get install -y iptables"
    )


def test_killing_the_owner_of_a_delay_line_leaves_no_namespace_rule_or_reader() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-m", "tests.runner.network.owner", "2", "100mbit,delay=1ms,jitter=1ms"],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        info = json.loads(owner.stdout.readline())
        inodes = set(info["inodes"])
        # The readers: threads of the owner, each with a netfilter netlink socket.
        readers = [t for t in psutil.Process(owner.pid).threads() if t.id != owner.pid]
        assert len(readers) >= 2
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    holders = [psutil.Process(pid) for pid in info["holders"] if psutil.pid_exists(pid)]
    assert scan.wait_until(lambda: scan.running(holders) == [])
    assert scan.wait_until(lambda: scan.pids_in(inodes) == [] and scan.handles_on(inodes) == [])
    assert scan.host_network_mentions_ours() == []


def test_closing_stops_every_reader_and_leaves_no_namespace() -> None:
    """The end of a run or its cancellation: close() stops the readers (their queues
    unbound) before the namespaces, whose rules go with them."""
    net = ShapedNetwork.open(parse_link("100mbit,delay=1ms,jitter=1ms"), num_workers=2)
    lines, inodes = net.lines, {h.net_inode for h in net.holders}
    assert len(lines) == 2 and all(line.alive() for line in lines)
    net.close()
    assert not any(line.alive() for line in lines)
    assert scan.wait_until(lambda: scan.pids_in(inodes) == [] and scan.handles_on(inodes) == [])
    assert scan.host_network_mentions_ours() == []
    net.close()  # idempotent
