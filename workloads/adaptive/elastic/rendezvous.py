"""The elastic group's shared records in a c10d key-value store, and the workers' heartbeats.

The store is the launcher's TCPStore (locally the supervisor's; on Kubernetes the one at the
rendezvous endpoint, as torchrun's c10d backend hosts it): it outlives any worker, and every
worker reaches it. Keys, all under the run's prefix:
    joins                    how many workers asked to join (an atomic counter)
    join/<n>                 the id of the n-th (1-based)
    gen/<g>                  generation g (membership.Generation as JSON), written once:
                             compare_set with an empty expected value, so when several
                             workers decide at once, the first record wins and all follow it
    gen/<g>/in/<id>          worker id checked in to leave generation g, at this step
    gen/<g>/at/<id>          worker id has come to form generation g's process group
    gen/<g>/at               how many have (an atomic counter)
    hb/<id>                  worker id's heartbeat counter
    latest                   the newest generation formed
    ended                    the run has ended (its writer set it): a joiner still waiting
                             to be admitted stops waiting
Every record but the counters is signed with the run's secret (signing.py); one that is not
is read as absent, so a process outside the run that reaches the store admits no member and
drops none (a forged generation is replaced by the one proposed).
A worker is alive while its heartbeat counter moves; it is counted as gone when the counter
has not moved for `dead_after_s` on the observer's own clock (no clocks are compared across
machines). Everything read back is parsed defensively: a damaged record is a MembershipError.
Not here: the decisions (membership.py) or process groups (group.py).
"""

from __future__ import annotations

import contextlib
import datetime
import threading
import time
from collections.abc import Callable, Sequence

from torch.distributed import Store

from workloads.adaptive.elastic.membership import Generation, MembershipError
from workloads.adaptive.elastic.signing import UNSIGNED, Signer

POLL_S = 0.02
PROPOSE_TRIES = 5  # a forged generation replaced, then forged again at once, this often
JOIN_RECORD_WAIT_S = 10.0  # a joiner writes its id just after it took its number


class Rendezvous:
    """One worker's view of the records (a thin layer over the store, no decisions)."""

    def __init__(self, store: Store, member: str, signer: Signer = UNSIGNED) -> None:
        self.store, self.member, self.signer = store, member, signer

    def _set(self, key: str, value: str) -> None:
        self.store.set(key, self.signer.seal(key, value))

    def _get(self, key: str) -> str | None:
        """The record at `key` if it is there and the run's own; None otherwise."""
        if not self.store.check([key]):
            return None
        return self.signer.open(key, self.store.get(key))

    def register(self) -> int:
        """Ask to join; returns this worker's join number (1-based)."""
        number = int(self.store.add("joins", 1))
        self._set(f"join/{number}", self.member)
        return number

    def joins(self) -> int:
        return int(self.store.add("joins", 0))

    def join_ids(
        self, first: int, last: int, wait_s: float = JOIN_RECORD_WAIT_S
    ) -> list[tuple[int, str]]:
        """(number, id) of the join requests first..last that are the run's own (a worker's
        id is written just after it took its number: each is waited for `wait_s`); a number
        with no record of the run's (a counter bumped from outside) is left out."""
        found = []
        for number in range(first, last + 1):
            key = f"join/{number}"
            if wait_s > 0:
                with contextlib.suppress(RuntimeError):  # still absent: c10d's wait timed out
                    self.store.wait([key], datetime.timedelta(seconds=wait_s))
            raw = self._get(key)
            if raw is not None:
                found.append((number, _member_id(raw, key)))
        return found

    def generation(self, number: int) -> Generation | None:
        key = f"gen/{number}"
        text = self._get(key)
        return None if text is None else Generation.from_json(text)

    def propose(self, generation: Generation) -> Generation:
        """Write generation g unless another worker already did; returns the one that stands.
        A record that is not the run's own is replaced (compare_set on its exact bytes)."""
        key = f"gen/{generation.number}"
        sealed = self.signer.seal(key, generation.to_json())
        expected: str | bytes = ""
        for _ in range(PROPOSE_TRIES):
            stored = self.store.compare_set(key, expected, sealed)  # type: ignore[arg-type]
            text = self.signer.open(key, stored)
            if text is not None:
                return Generation.from_json(text)
            expected = stored  # the binding takes bytes as they are
        raise MembershipError(f"record {key} is rewritten from outside the run as it is proposed")

    def latest(self) -> int:
        key = "latest"
        text = self._get(key)
        if text is None:
            return -1
        try:
            return int(text)
        except ValueError:
            raise MembershipError(f"damaged record {key}: not a generation number") from None

    def publish_latest(self, number: int) -> None:
        self._set("latest", str(number))

    def mark_ended(self) -> None:
        self._set("ended", "1")

    def ended(self) -> bool:
        return self._get("ended") is not None

    def check_in(self, number: int, step: int) -> None:
        self._set(f"gen/{number}/in/{self.member}", str(step))

    def checked_in(self, number: int, members: Sequence[str]) -> dict[str, int]:
        steps = {}
        for member in members:
            text = self._get(f"gen/{number}/in/{member}")
            if text is not None:
                try:
                    steps[member] = int(text)
                except ValueError:
                    raise MembershipError(f"damaged check-in of {member}") from None
        return steps

    def arrive(self, number: int) -> None:
        self._set(f"gen/{number}/at/{self.member}", "1")
        self.store.add(f"gen/{number}/at", 1)

    def arrivals(self, number: int) -> int:
        """How many have arrived (one read: the usual case is that everyone has)."""
        return int(self.store.add(f"gen/{number}/at", 0))

    def arrived(self, number: int, members: Sequence[str]) -> set[str]:
        return {m for m in members if self._get(f"gen/{number}/at/{m}") is not None}

    def heartbeat_count(self, member: str) -> int:
        return int(self.store.add(f"hb/{member}", 0))


def _member_id(text: str, key: str) -> str:
    """A worker id as stored; anything but a printable name is a damaged record."""
    if not text or not text.isprintable():
        raise MembershipError(f"damaged record {key}: {text!r} is no worker id")
    return text


def wait_for(
    condition: Callable[[], object], timeout_s: float, what: str, poll_s: float = POLL_S
) -> object:
    """Poll until `condition()` returns something truthy; MembershipError after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise MembershipError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


class LivenessWatch:
    """Which members' heartbeats have stopped, as seen from here since the watch began."""

    def __init__(self, rendezvous: Rendezvous, members: Sequence[str], dead_after_s: float):
        now = time.monotonic()
        self._rdzv, self._dead_after_s = rendezvous, dead_after_s
        self._seen = {m: (rendezvous.heartbeat_count(m), now) for m in members}

    def gone(self, members: Sequence[str]) -> set[str]:
        now, out = time.monotonic(), set()
        for member in members:
            count = self._rdzv.heartbeat_count(member)
            last_count, since = self._seen[member]
            if count != last_count:
                self._seen[member] = (count, now)
            elif now - since >= self._dead_after_s:
                out.add(member)
        return out


class Heartbeat:
    """A daemon thread bumping this worker's counter every period_s over its own store
    connection (a store client is not shared across threads). It dies with the process."""

    def __init__(self, connect: Callable[[], Store], member: str, period_s: float) -> None:
        self._store, self._key, self._period_s = connect(), f"hb/{member}", period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="elastic-heartbeat", daemon=True)

    def start(self) -> None:
        self._store.add(self._key, 1)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self._period_s)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                self._store.add(self._key, 1)
            except RuntimeError:  # the store is gone: the run is over
                return
