"""An elastic process group: workers leave (killed) and join (started) a running group, which
re-forms in place; no worker restarts, and the state comes from a surviving worker.

The life of a worker:
- `start(initial_workers)`: register in the store; the first `initial_workers` to register
  form generation 0 together; a later one is a joiner and waits until the members admit it.
- At an agreed decision point (policy.py; the ElasticPolicy below proposes it when joiners
  wait), every member calls `grow(world_size, step)`: rank 0 writes the next generation (the
  members, then the waiting joiners), and members and joiners form its process group.
- When a collective fails (gloo raises as soon as a peer's connection closes; a hung peer
  after the process group's timeout), every survivor calls `recover(step, error)`: it checks in
  with its completed steps, waits until every member has either checked in or stopped its
  heartbeat for `dead_after_s`, and the first survivor to decide writes the next generation;
  all follow that record. If nobody left, the error was not a departure and is raised again.
After each change the caller broadcasts the training state from `change.source_rank`
(transfer.py) and rebuilds whatever holds the old process group (DDP's reducer). A process
group is `init_process_group` over PrefixStore("pg/<g>/") of the same store, so generations
never see each other's keys. Its members first meet in the store: a member that dies after it
was counted in (a second kill while the group re-forms) would otherwise hold the others in
init_process_group for the whole collective timeout; FormingFailed says it went quiet, and
the caller re-forms again as after a failed collective.

Why not torchrun's elastic agent alone: on a membership change it stops and restarts every
worker (all of a node's workers when one of them fails; every node's when a node joins), so
the state must come back from a checkpoint. KungFu resizes in place instead (its config
server and resize_cluster_from_url, srcs/python/kungfu/python/elastic_state.py), as torchft
does with a per-step quorum; this follows them. docs/adaptive-elastic.md says how it maps
onto Kubernetes and where it cannot.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed import PrefixStore, Store

from workloads.adaptive.elastic.membership import (
    Generation,
    MembershipError,
    after_failure,
    check_size,
    first_generation,
    grown,
)
from workloads.adaptive.elastic.rendezvous import Heartbeat, LivenessWatch, Rendezvous, wait_for
from workloads.adaptive.elastic.signing import UNSIGNED, Signer
from workloads.adaptive.policy import Hook, Knob, Proposal, View


@dataclass(frozen=True)
class ElasticConfig:
    min_workers: int
    max_workers: int
    heartbeat_s: float = 0.5
    dead_after_s: float = 5.0  # a heartbeat still for this long: the worker is gone
    rendezvous_timeout_s: float = 300.0  # forming a generation, or a joiner's wait
    pg_timeout_s: float = 60.0  # a collective that hangs this long fails

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(
                f"need 1 <= min <= max workers, got {self.min_workers}:{self.max_workers}"
            )
        if self.dead_after_s <= 2 * self.heartbeat_s:
            raise ValueError("dead_after_s must exceed two heartbeat periods")


@dataclass(frozen=True)
class Change:
    """A new generation, formed: what it was, what it is, whose state to adopt."""

    previous: Generation | None
    current: Generation

    @property
    def source_rank(self) -> int:
        return self.current.source

    @property
    def departed(self) -> tuple[str, ...]:
        """The members of the previous generation that are not in this one."""
        if self.previous is None:
            return ()
        return tuple(m for m in self.previous.members if m not in self.current.members)

    @property
    def reason(self) -> str:
        departed = self.departed
        return f"{', '.join(departed)} left" if departed else self.current.reason


class FormingFailed(RuntimeError):
    """A member of a new generation went quiet before its process group formed. A
    RuntimeError, as a failed collective is: the survivors recover from it the same way."""


class ElasticGroup:
    def __init__(
        self,
        connect: Callable[[], Store],
        member: str,
        config: ElasticConfig,
        backend: str = "gloo",
        signer: Signer = UNSIGNED,
    ) -> None:
        """`connect` opens a client of the run's store (called once here, once for the
        heartbeat thread); `member` is this worker's id, unique in the run; `signer` seals
        and opens its records with the run's secret (signing.py)."""
        self.member, self.config, self._backend = member, config, backend
        self._store = connect()
        self._rdzv = Rendezvous(self._store, member, signer)
        self._heartbeat = Heartbeat(connect, member, config.heartbeat_s)
        self.generation: Generation | None = None

    @property
    def rank(self) -> int:
        return self._current().rank_of(self.member)

    @property
    def world_size(self) -> int:
        return self._current().world_size

    def start(self, initial_workers: int) -> Change:
        """Form generation 0 with the first `initial_workers` to register, or wait as a joiner."""
        self._heartbeat.start()
        number = self._rdzv.register()
        timeout_s = self.config.rendezvous_timeout_s
        if number > initial_workers:
            return self._form(self._wait_admitted(timeout_s))
        wait_for(lambda: self._rdzv.joins() >= initial_workers, timeout_s, "the first workers")
        starting = [member for _, member in self._rdzv.join_ids(1, initial_workers)]
        return self._form(self._rdzv.propose(first_generation(starting, initial_workers)))

    def pending_joiners(self) -> int:
        """Workers waiting to join (read by rank 0 only: the others' answer is never used)."""
        if self.rank != 0:
            return 0
        admitted = self._current().admitted
        # Only the requests the run's own workers signed: a counter bumped from outside
        # must not make the group re-form for nobody.
        return len(self._rdzv.join_ids(admitted + 1, self._rdzv.joins(), wait_s=0))

    def grow(self, world_size: int, step: int) -> Change:
        """Admit joiners up to `world_size`, at a step every member agreed on."""
        current = self._current()
        self._rdzv.check_in(current.number, step)  # a concurrent recovery must not wait for us
        if self.rank == 0:
            wanted = world_size - current.world_size
            found = self._rdzv.join_ids(current.admitted + 1, self._rdzv.joins())[:wanted]
            admitted = found[-1][0] if found else current.admitted
            joiners = [member for _, member in found]
            decided = self._rdzv.propose(grown(current, joiners, step, admitted))
        else:  # rank 0 writes it, unless it dies first: then the survivors decide
            decided = self._settle(current, wait_for_writer=True)
        return self._form(decided)

    def recover(self, step: int, error: BaseException) -> Change:
        """After a failed collective: the survivors' next generation. Raises `error` again
        when every member is still there (the failure was not a departure)."""
        current = self._current()
        # Closing our connections first fails the collectives peers are blocked in at once,
        # rather than after the process group's timeout (gloo sees the closed connection).
        _destroy_process_group()
        before = current
        while True:
            self._rdzv.check_in(current.number, step)
            decided = self._settle(current, wait_for_writer=False)
            if decided.members == current.members:
                raise error
            try:
                self._form(decided)
            except FormingFailed:  # another one left while it formed: re-form without it too
                current = decided
                continue
            return Change(before, decided)  # every departure since `before`, in one change

    def _settle(self, current: Generation, wait_for_writer: bool) -> Generation:
        """The generation after `current`: the one recorded, or, once every member has
        checked in or gone quiet (and some have gone, when rank 0 is expected to write it),
        the survivors' one, proposed by whoever gets there first."""
        watch = LivenessWatch(self._rdzv, current.members, self.config.dead_after_s)
        number = current.number + 1

        def settled() -> Generation | None:
            decided = self._rdzv.generation(number)
            if decided is not None:
                return decided
            steps = self._rdzv.checked_in(current.number, current.members)
            waiting = [m for m in current.members if m not in steps]
            if waiting and set(waiting) <= watch.gone(waiting):
                return self._rdzv.propose(after_failure(current, steps))
            if not waiting and not wait_for_writer:
                return self._rdzv.propose(after_failure(current, steps))
            return None

        outcome = wait_for(settled, self.config.rendezvous_timeout_s, f"generation {number}")
        assert isinstance(outcome, Generation)
        return outcome

    def close(self) -> None:
        """Leave at the run's end; rank 0 (the run's writer) also says the run has ended, so
        that a joiner still waiting to be admitted stops waiting."""
        if self.generation is not None and self.rank == 0:
            self.end()
        self._heartbeat.stop()
        _destroy_process_group()

    def end(self) -> None:
        """Say that the run has ended (or cannot go on): a joiner waiting stops waiting."""
        self._rdzv.mark_ended()

    def _current(self) -> Generation:
        if self.generation is None:
            raise RuntimeError("the elastic group has not started")
        return self.generation

    def _wait_admitted(self, timeout_s: float) -> Generation:
        """The newest generation, once it includes this joiner."""

        def admitting() -> Generation | None:
            if self._rdzv.ended():
                raise MembershipError(f"the run ended before worker {self.member} was admitted")
            newest = None
            number = max(0, self._rdzv.latest())
            while (candidate := self._rdzv.generation(number)) is not None:
                newest, number = candidate, number + 1
            return newest if newest is not None and self.member in newest.members else None

        admitted = wait_for(admitting, timeout_s, f"worker {self.member} to be admitted")
        assert isinstance(admitted, Generation)
        return admitted

    def _form(self, generation: Generation) -> Change:
        previous, self.generation = self.generation, generation
        try:
            check_size(generation, self.config.min_workers, self.config.max_workers)
        except MembershipError:
            self.end()  # too few left: the run ends here
            raise
        rank = generation.rank_of(self.member)  # Excluded if it left us out
        self._rdzv.publish_latest(generation.number)
        _destroy_process_group()
        self._meet(generation)
        dist.init_process_group(
            self._backend,
            store=PrefixStore(f"pg/{generation.number}/", self._store),
            rank=rank,
            world_size=generation.world_size,
            timeout=datetime.timedelta(seconds=self.config.pg_timeout_s),
        )
        return Change(previous, generation)

    def _meet(self, generation: Generation) -> None:
        """Wait until every member has come to form `generation`; FormingFailed as soon as
        one that has not has been quiet for `dead_after_s` (it died after the generation was
        decided: init_process_group would wait for it until the collective timeout)."""
        number, members = generation.number, generation.members
        self._rdzv.arrive(number)
        watches: list[LivenessWatch] = []  # made once someone is missing: the rare case

        def everyone() -> bool:
            if self._rdzv.arrivals(number) >= len(members):
                return True
            if not watches:
                watches.append(LivenessWatch(self._rdzv, members, self.config.dead_after_s))
            missing = [m for m in members if m not in self._rdzv.arrived(number, members)]
            gone = watches[0].gone(missing)
            if gone:
                raise FormingFailed(f"{', '.join(sorted(gone))} left while generation "
                                    f"{number} formed")  # fmt: skip
            return not missing

        wait_for(everyone, self.config.rendezvous_timeout_s, f"the members of generation {number}")


def _destroy_process_group() -> None:
    # After a peer died the old group may be half broken; destroying it is all that is left
    # to do with it, and a failure to do so cleanly must not stop the survivors.
    if dist.is_initialized():
        with contextlib.suppress(RuntimeError):
            dist.destroy_process_group()


class ElasticPolicy:
    """Admits waiting joiners up to max_workers (knob "workers"), before a step; rank 0's
    count of waiting joiners is the one that counts (policy.py's agreement)."""

    name = "elastic"
    knobs: tuple[Knob, ...] = (Knob("workers", integral=True),)
    hooks: tuple[Hook, ...] = ("before_step",)

    def __init__(self, pending_joiners: Callable[[], int], max_workers: int) -> None:
        self._pending, self._max_workers = pending_joiners, max_workers

    def propose(self, hook: Hook, view: View) -> Sequence[Proposal]:
        workers = int(view.knobs["workers"])
        waiting = self._pending()
        if waiting <= 0 or workers >= self._max_workers:
            return ()
        new = min(self._max_workers, workers + waiting)
        return (Proposal("workers", new, f"{waiting} worker(s) waiting to join"),)
