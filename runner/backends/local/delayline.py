"""A delay line for kernels without netem: the packets an iptables NFQUEUE rule queues (a
worker's incoming ones, network.py says why) are held for the link's delay, then released in
the order they came, or dropped.

    line = DelayLine.start(link, ns_file="/proc/<pid>/ns/net")   # one per link, one thread
    ...                                                           # the link has its delay
    line.impair(delay=False, loss=False)      # the probe's base round trip; then both True
    line.stop(); line.tally()                                     # what it held, dropped

Each packet waits in the kernel; this process only holds its id and the time it may leave:
arrival + delay + a uniform draw in +-jitter, but never before the packet ahead of it leaves
(jitter without reordering, as the link's grammar says). A packet is dropped at arrival with
the link's loss probability, or when the packets held would exceed the line's memory bound
(`budget_bytes`, counted in the tally as `full`). The thread sleeps in select() until the next
release or the next arrival (microsecond timeouts, no busy-waiting), and releases every due
packet with one batch verdict.

Its life is its owner's: a thread of the owner's process (the run's supervisor), its socket
closed when the process ends however it ends; the kernel then drops what the queue held and
every packet the rule queues after (no reader bound, fail-open off), so a link whose line is
gone carries nothing, never packets without their delay; `failure` says why.

Not here: the protocol (nfqueue.py), the rule and the namespaces (network.py).
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import select
import threading
import time
from dataclasses import dataclass, field

from runner.backends.local import realtime
from runner.backends.local.namespaces import in_namespace
from runner.backends.local.nfqueue import Packet, QueueSocket
from runner.job.link import PPM, Link

QUEUE_NUM = 0  # queues are per network namespace: each worker's line has its own queue 0
# What the kernel holds before it drops (its own bound, in packets): with GSO a packet is up to
# 64 KiB, so the line's byte budget, not this, is the bound that acts.
MAX_KERNEL_PACKETS = 65536
MIN_BUDGET_BYTES = 4 << 20
FULL_FRAME_BYTES = 1514  # a packet whose length the kernel did not say is counted as this


@dataclass(frozen=True)
class Tally:
    """What a delay line did with the packets it read."""

    packets: int
    released: int
    lost: int  # dropped with the link's loss probability
    full: int  # dropped because the line held its memory bound
    max_held_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {
            "packets": self.packets, "released": self.released, "lost": self.lost,
            "dropped_full": self.full, "max_held_bytes": self.max_held_bytes,
        }  # fmt: skip


@dataclass
class Schedule:
    """When each held packet leaves: pure bookkeeping, no socket (tested on its own)."""

    delay_s: float
    jitter_s: float
    loss_share: float
    budget_bytes: int
    rng: random.Random = field(default_factory=random.Random)
    held: collections.deque[tuple[float, int, int]] = field(default_factory=collections.deque)
    held_bytes: int = 0
    last_release_s: float = 0.0
    counts: dict[str, int] = field(
        default_factory=lambda: {"packets": 0, "released": 0, "lost": 0, "full": 0, "max": 0}
    )

    def arrive(self, packet: Packet, now_s: float) -> bool:
        """Hold `packet`, arrived at `now_s`; False when it is to be dropped instead."""
        self.counts["packets"] += 1
        if self.loss_share and self.rng.random() < self.loss_share:
            self.counts["lost"] += 1
            return False
        size = packet.length_bytes or FULL_FRAME_BYTES
        if self.held_bytes + size > self.budget_bytes:
            self.counts["full"] += 1
            return False
        wait_s = self.delay_s + (self.rng.uniform(-self.jitter_s, self.jitter_s) if
                                 self.jitter_s else 0.0)  # fmt: skip
        release_s = max(now_s + wait_s, self.last_release_s)  # never ahead of an earlier one
        self.last_release_s = release_s
        self.held.append((release_s, packet.packet_id, size))
        self.held_bytes += size
        self.counts["max"] = max(self.counts["max"], self.held_bytes)
        return True

    def due(self, now_s: float) -> int | None:
        """The id of the last packet due by `now_s`, every earlier one released with it;
        None when none is due."""
        last = None
        while self.held and self.held[0][0] <= now_s:
            _, last, size = self.held.popleft()
            self.held_bytes -= size
            self.counts["released"] += 1
        return last

    def next_release_s(self) -> float | None:
        return self.held[0][0] if self.held else None

    def tally(self) -> Tally:
        c = self.counts
        return Tally(c["packets"], c["released"], c["lost"], c["full"], c["max"])


def budget_bytes(link: Link) -> int:
    """What one line may hold: twice the link's delay (and jitter) worth of its rate, plus the
    shaper's own queue, which TCP fills before it backs off; at least 4 MiB."""
    in_flight = link.rate_bit_s // 8 * (link.delay_us + link.jitter_us) // 10**6
    return max(MIN_BUDGET_BYTES, 2 * in_flight + link.queue_bytes)


class DelayLine:
    """One link's reader: a thread holding a bound queue in the link's namespace."""

    def __init__(self, queue: QueueSocket, schedule: Schedule, loss_share: float) -> None:
        self._queue = queue
        self._schedule = schedule
        self._loss_share = loss_share
        self._delay = (schedule.delay_s, schedule.jitter_s)
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self.failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="delay-line", daemon=True)

    @classmethod
    def start(cls, link: Link, ns_file: str, loss_now: bool = False) -> DelayLine:
        """A line for `link` on the queue of the namespace at `ns_file`, running, with its
        delay; its loss waits for impair(..., loss=True) unless `loss_now` (the probe
        measures the round trip without it). OSError (QueueError) when the kernel refuses
        the queue."""
        queue = in_namespace(ns_file, lambda: QueueSocket.bind(QUEUE_NUM, MAX_KERNEL_PACKETS))
        loss_share = link.loss_ppm / PPM
        schedule = Schedule(
            delay_s=link.delay_us / 1e6, jitter_s=link.jitter_us / 1e6,
            loss_share=loss_share if loss_now else 0.0, budget_bytes=budget_bytes(link),
        )  # fmt: skip
        line = cls(queue, schedule, loss_share)
        line._thread.start()
        return line

    def impair(self, delay: bool, loss: bool) -> None:
        """Switch the link's delay (and jitter) and its loss on or off, for what arrives next."""
        with self._lock:
            self._schedule.delay_s, self._schedule.jitter_s = self._delay if delay else (0, 0)
            self._schedule.loss_share = self._loss_share if loss else 0.0

    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def thread_id(self) -> int | None:
        """The reader thread's id (/proc/self/task/<id>), for what it costs."""
        return self._thread.native_id

    def tally(self) -> Tally:
        with self._lock:
            return self._schedule.tally()

    def stop(self) -> None:
        """End the thread and unbind the queue. Idempotent."""
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            self._thread.join()
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._wake_r = self._wake_w = -1
            self._queue.close()

    def _run(self) -> None:
        realtime.prefer_this_thread()
        try:
            self._loop()
        except Exception as err:  # the line's end is the link's: say why for broken()
            self.failure = f"delay line stopped: {err}"

    def _loop(self) -> None:
        schedule, queue = self._schedule, self._queue
        while True:
            next_s = schedule.next_release_s()
            timeout_s = None if next_s is None else max(0.0, next_s - time.monotonic())
            # select(), not poll() or epoll: their timeouts are whole milliseconds, a delay
            # line's are microseconds. (Descriptors above 1023 fail it: the line then stops,
            # and broken() says so; a supervisor holds a few dozen.)
            readable, _, _ = select.select([queue.fileno(), self._wake_r], [], [], timeout_s)
            if self._wake_r in readable:
                return
            now_s = time.monotonic()
            with self._lock:
                for packet in queue.read() if readable else ():
                    if not schedule.arrive(packet, now_s):
                        queue.drop(packet.packet_id)
                last = schedule.due(time.monotonic())
            if last is not None:
                queue.accept_through(last)
