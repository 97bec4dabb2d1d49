"""A shaped network for a local run: every worker in a network namespace of its own, joined to
one bridge by a veth pair whose two ends are both shaped to the link's rate.

    with ShapedNetwork.open(parse_link("100mbit"), num_workers=2) as net:
        record = net.probe()                            # the link as measured (probe.py)
        argv = net.command(0, ["python", "-m", ...], cwd)   # runs in worker 0's namespaces
        ...                                             # close(): nothing is left

Topology. The bridge lives in a namespace of its own, so nothing is ever created in the
host's namespace (not an interface, a route or a qdisc). Worker i's namespace has `lo` and
`veth0` with 198.18.0.<i+1>/24 and nothing else: no route leaves it. 198.18.0.0/15 is the
range RFC 2544 sets aside for benchmarking network devices; since these addresses exist only
inside the run's namespaces, they cannot collide with the host's routes whatever the host
uses (a VPN's fake-IP range included), so there is nothing to check there.

Shaping. tbf on the egress of both ends of each veth: the worker's end limits what it sends,
the bridge's end what it receives, so a worker has a full-duplex link of the given rate each
way, as a NIC on a switch port. tbf rather than htb because each interface needs one rate and
nothing else: htb's classes and filters would add a tree and a classifier that share nothing.
Bucket depth and queue length: link.py. IPv6 addresses are never generated, so gloo, told to
bind to veth0, finds its one IPv4 address, and no router solicitations cross the link.

Delay, jitter and loss (impairment). Added once to every packet between two workers, so a
round trip gains the delay twice (link.py). Where the kernel has netem (tried, never assumed:
`impair.netem_available`), a netem qdisc at the root of each worker's end, on its outgoing packets,
the tbf below it. Where it has not, or jitter is asked (netem's jitter reorders packets), the
delay line, on each worker's incoming packets: an iptables rule in the worker's namespace
hands every packet arriving by veth0 to NFQUEUE, and a reader thread of this process
(delayline.py) holds it for its delay. Incoming, not outgoing: a packet held before it leaves
its sender still counts against the sending socket's TCP Small Queues budget, and TCP then
kept two packets in flight (a 1gbit link with 5 ms carried 7 Mbit/s); one that arrived was
released by its sender when the veth pair took it (netem orphans its packets for the same
reason). Loss is switched on after the probe, so the probe's round trip is the delay's alone.

Lifetime: namespaces.py (held by processes that die with the owner; a killed owner included).
The iptables rules and qdiscs live in the namespaces and go with them; the delay lines are
threads of the owner and their queues are unbound when it ends, however it ends.

Not here: whether this machine can build one (network_check.py), parsing the link (link.py),
measuring it (probe.py), choosing netem or the delay line (impair.py), the delay line itself
(delayline.py), the launcher (launch.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract import files
from contract.network import NetworkRecord
from runner.backends.local import impair, namespaces, probe
from runner.backends.local.delayline import DelayLine
from runner.backends.local.namespaces import Holder, Kind, Lifeline, NamespaceError
from runner.backends.local.network_check import NetworkUnavailable
from runner.job.link import Link

INTERFACE = "veth0"  # the worker's end of its link, in every worker namespace
BRIDGE = "br0"
SUBNET_PREFIX = "198.18.0."  # RFC 2544's benchmarking range; see the module docstring
PREFIX_LENGTH = 24
MAX_WORKERS = 250  # host numbers 1..250 of the /24
IDLE_POLL_S = 0.02  # how often the probe's end looks at the queues it filled


def address(index: int) -> str:
    """Worker `index`'s address on its link (worker 0's is the rendezvous address)."""
    if not 0 <= index < MAX_WORKERS:
        raise ValueError(f"worker index {index} is outside 0..{MAX_WORKERS - 1}")
    return f"{SUBNET_PREFIX}{index + 1}"


@dataclass(frozen=True)
class LinkTraffic:
    """What one worker's link carried so far, as its two tbf qdiscs count it."""

    sent_bytes: int
    received_bytes: int
    dropped_packets: int  # by either direction's queue when full
    queued_bytes: int  # in either direction's queue now, not yet sent


class ShapedNetwork:
    """The namespaces, veth pairs, bridge and qdiscs of one run; close() removes them all.

    The process that opens it owns it (namespaces.py): the holders are its children, so it
    must not reap children it did not start itself (os.wait(), waitpid(-1)), which would let a
    holder's pid be reused while this object still names its namespaces by it."""

    def __init__(self, link: Link, bridge: Holder, workers: list[Holder], lifeline: Lifeline):
        self.link = link
        self._bridge = bridge
        self._workers = workers
        self._lifeline = lifeline
        self._lines: list[DelayLine] = []
        self.impairment = impair.impairment(link)
        self.tally_path: Path | None = None  # where close() writes what the links carried

    @classmethod
    def open(cls, link: Link, num_workers: int, delay_line: bool = False) -> ShapedNetwork:
        """Build it; NetworkUnavailable (one line) when this machine cannot. `delay_line`:
        through the delay line even where the link asks nothing of it (bench/
        shaped_delayline.py measures what the line itself costs)."""
        if not 1 <= num_workers <= MAX_WORKERS:
            raise ValueError(f"num_workers must be 1..{MAX_WORKERS}, got {num_workers}")
        lifeline = Lifeline()
        holders: list[Holder] = []
        net: ShapedNetwork | None = None
        try:
            bridge = namespaces.spawn(lifeline, Kind.NET)
            holders.append(bridge)
            for _ in range(num_workers):
                holders.append(namespaces.spawn(lifeline, Kind.NET_PID_MOUNT))
            net = cls(link, bridge, holders[1:], lifeline)
            net.impairment = impair.DELAY_LINE if delay_line else net.impairment
            net._configure()
        except BaseException as err:
            if net is not None:
                net._stop_lines()
            namespaces.end(holders, lifeline)
            if isinstance(err, (NamespaceError, OSError)):
                raise NetworkUnavailable(f"cannot build the shaped network: {err}") from err
            raise
        return net

    @property
    def num_workers(self) -> int:
        return len(self._workers)

    @property
    def holders(self) -> tuple[Holder, ...]:
        """The bridge's holder, then each worker's (for tests and the probe)."""
        return (self._bridge, *self._workers)

    @property
    def lines(self) -> tuple[DelayLine, ...]:
        """Each worker's delay line (none without one), in worker order."""
        return tuple(self._lines)

    def worker(self, index: int) -> Holder:
        return self._workers[index]

    def command(self, index: int, argv: Sequence[str], cwd: str) -> list[str]:
        """`argv` as it must be started to run in worker `index`'s namespaces, in `cwd`.

        It runs in a PID namespace of its own: when the network ends, or its owner dies,
        the kernel kills whatever it left running."""
        if not 0 <= index < self.num_workers:
            raise ValueError(f"this network has workers 0..{self.num_workers - 1}, not {index}")
        return namespaces.enter_argv(self._workers[index], argv, cwd)

    def probe(self) -> NetworkRecord:
        """The link as measured now (run it before the workers start: it needs the link idle),
        idle again when this returns, and its loss switched on. ProbeError (one line) when it
        carries nothing, or the round trip it adds is not the delay asked for.

        With a delay, the round trip is measured twice: through the link with its delay off
        (the machine's own round trip, the delay line's pass included), then on; what the
        delay adds is the difference, compared with what was asked."""
        description = probe.describe(self.link, self.num_workers, impair.describe(self.impairment))
        if self.num_workers < 2:
            self._impair(delay=True, loss=True)
            return probe.unmeasured(self.link, description)
        ends = (self._workers[0].ns_file("net"), self._workers[1].ns_file("net"), address(1))
        base_ms = None
        if self.link.delay_us:
            self._impair(delay=False, loss=False)
            base_ms = probe.round_trip_only(*ends)
            self._impair(delay=True, loss=False)
        found = probe.measure(*ends, warmup_s=probe.warmup_s(self.link))
        self._await_idle(self._probed_queues())
        if base_ms is not None:
            mismatch = probe.round_trip_problem(self.link, found.rtt_ms, base_ms)
            if mismatch is not None:
                raise probe.ProbeError(mismatch)
        self._impair(delay=True, loss=True)
        return probe.record(self.link, description, found, base_ms)

    def _impair(self, delay: bool, loss: bool) -> None:
        """Switch every link's delay and loss on or off (the probe measures without them)."""
        if self.impairment == impair.NETEM:
            for worker in self._workers:
                namespaces.run_batch(
                    worker, "tc", [impair.netem(self.link, INTERFACE, "change", delay, loss)]
                )
        for line in self._lines:
            line.impair(delay, loss)

    def traffic(self, index: int) -> LinkTraffic:
        """What worker `index`'s link has carried, counted by its qdiscs."""
        sent = _tbf_counters(self._workers[index], INTERFACE)
        received = _tbf_counters(self._bridge, _bridge_port(index))
        return LinkTraffic(
            sent_bytes=sent["bytes"],
            received_bytes=received["bytes"],
            dropped_packets=sent["drops"] + received["drops"],
            queued_bytes=sent["backlog"] + received["backlog"],
        )

    def tally(self) -> dict[str, object]:
        """What every link carried and dropped so far (contract.network.TALLY_FILE)."""
        links: list[dict[str, object]] = []
        for i in self._range:
            entry: dict[str, object] = {"worker": i}
            with contextlib.suppress(NamespaceError, OSError, subprocess.SubprocessError,
                                     ValueError, KeyError):  # fmt: skip
                traffic = self.traffic(i)
                entry |= {"sent_bytes": traffic.sent_bytes,
                          "received_bytes": traffic.received_bytes,
                          "dropped_packets_by_shaper": traffic.dropped_packets}  # fmt: skip
            if self._lines:
                entry["delay_line"] = self._lines[i].tally().to_dict()
            links.append(entry)
        return {"link": self.link.text, "impairment": self.impairment, "links": links}

    def _probed_queues(self) -> list[int]:
        """The workers whose links the probe crossed."""
        return [0, 1] if self.num_workers >= 2 else []

    def _await_idle(self, indices: list[int]) -> None:
        """Until the links of `indices` have nothing queued, or as long as a full queue takes.

        Closing the probe's sockets does not empty the shaper's queue: what TCP had queued
        there still crosses the link at its rate (at 100kbit about 4.7 s of it, at 1mbit 1 s),
        and the workers, started next, would meet a link that is not idle."""
        deadline = time.monotonic() + 2 * self.link.queue_bytes * 8 / self.link.rate_bit_s + 1
        while self._queued_bytes(indices) and time.monotonic() < deadline:
            time.sleep(IDLE_POLL_S)

    def _queued_bytes(self, indices: list[int]) -> int:
        """What the links of `indices` hold queued; 0 when the counters cannot be read (the
        waiting is a courtesy: a broken link is the workers' to find, and it fails them)."""
        try:
            return sum(self.traffic(i).queued_bytes for i in indices)
        except (NamespaceError, OSError, subprocess.SubprocessError, ValueError, KeyError):
            return 0

    def broken(self) -> str | None:
        """Why the network no longer carries anything, or None: a holder that has exited
        (killed by someone) took its namespaces and their links with it. The workers would
        then wait on peers they cannot reach until the collectives' timeout, and fail with a
        line that does not name the cause."""
        for i, holder in enumerate(self.holders):
            if not holder.alive():
                whose = "the bridge's" if i == 0 else f"worker {i - 1}'s"
                return (
                    f"the shaped network broke: {whose} namespace holder (pid {holder.pid}) "
                    f"exited with code {holder.process.returncode}, and its links with it"
                )
        for i, line in enumerate(self._lines):
            if not line.alive():
                return (
                    f"the shaped network broke: worker {i}'s {line.failure or 'delay line ended'}"
                )
        return None

    def close(self) -> None:
        """Write the tally (when asked for, once), stop the delay lines and end every holder;
        the kernel then removes the namespaces and all in them. Idempotent."""
        if self.tally_path is not None and not self._lifeline.cut_already:
            with contextlib.suppress(OSError, ValueError):  # a record's loss, never the run's
                files.write_json(self.tally_path, self.tally())
        self._stop_lines()
        namespaces.end(self.holders, self._lifeline)

    def _stop_lines(self) -> None:
        for line in self._lines:
            line.stop()

    def __enter__(self) -> ShapedNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- building --------------------------------------------------------------------------

    def _configure(self) -> None:
        """The bridge and every link (created from the bridge's namespace, each veth's worker
        end straight into the worker's namespace), then addresses, then the qdiscs."""
        bridge = [f"link add name {BRIDGE} type bridge", *_quiet_up(BRIDGE)]
        for i, worker in enumerate(self._workers):
            port = _bridge_port(i)
            bridge += [
                f"link add name {port} type veth peer name {INTERFACE} netns {worker.pid}",
                f"link set dev {port} master {BRIDGE}",
                *_quiet_up(port),
            ]
        namespaces.run_batch(self._bridge, "ip", bridge)
        namespaces.run_batch(self._bridge, "tc", [self._tbf(_bridge_port(i)) for i in self._range])
        for i, worker in enumerate(self._workers):
            link = [
                "link set dev lo up",
                f"link set dev {INTERFACE} addrgenmode none",
                f"address add {address(i)}/{PREFIX_LENGTH} dev {INTERFACE}",
                f"link set dev {INTERFACE} up",
            ]
            namespaces.run_batch(worker, "ip", link)
            self._shape_worker_end(worker)

    def _shape_worker_end(self, worker: Holder) -> None:
        """tbf alone; under netem for a delay; or with the delay line's rule and reader."""
        if self.impairment == impair.NETEM:
            tbf = self._tbf(INTERFACE).replace("root", "parent 1:1 handle 10:")
            netem = impair.netem(self.link, INTERFACE, "add", True, False)
            namespaces.run_batch(worker, "tc", [netem, tbf])
            return
        namespaces.run_batch(worker, "tc", [self._tbf(INTERFACE)])
        if self.impairment == impair.DELAY_LINE:
            # The reader is bound first: a packet queued with no reader is dropped.
            self._lines.append(DelayLine.start(self.link, worker.ns_file("net")))
            impair.run_in(worker, ["iptables", "-w", *impair.delay_line_rule(INTERFACE)])

    @property
    def _range(self) -> range:
        return range(self.num_workers)

    def _tbf(self, device: str) -> str:
        link = self.link
        return (
            f"qdisc add dev {device} root tbf rate {link.rate_bit_s}bit "
            f"burst {link.burst_bytes} limit {link.queue_bytes}"
        )


def _bridge_port(index: int) -> str:
    return f"w{index}"


def _quiet_up(device: str) -> list[str]:
    """Up, without the IPv6 link-local address (and its chatter) the kernel would give it."""
    return [f"link set dev {device} addrgenmode none", f"link set dev {device} up"]


def _tbf_counters(holder: Holder, device: str) -> dict[str, int]:
    argv = namespaces.enter_net_argv(holder, ["tc", "-s", "-j", "qdisc", "show", "dev", device])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True)
    for qdisc in json.loads(done.stdout):
        if qdisc.get("kind") == "tbf":
            return {key: int(qdisc[key]) for key in ("bytes", "drops", "backlog")}
    raise NamespaceError(f"no tbf qdisc on {device}")
