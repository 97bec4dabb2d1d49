"""Generations of an elastic group and how one follows another, as pure functions.

A generation is the ordered list of member ids that form one process group (rank = index),
the rank whose state every member adopts when it forms (`source`), and how many join
requests it has admitted. The next generation comes from one of two events:
- growth, agreed at a decision point: the members, in order, then the next joiners in the
  order they asked; the source is rank 0 (every member holds the same state);
- a failure: the members that checked in, in their old order (so the new rank 0 is the
  lowest surviving rank), no joiners; the source is the survivor that had completed the most
  steps (ties: the lowest rank). Ranks can be one step apart when a peer dies during a
  step's collective (one may have finished the all-reduce and the optimizer step, another
  not); the most advanced consistent state loses least work, as torchft recovers from the
  replica with the highest step (pytorch/torchft, docs "Protocol").
Not here: the store the generations live in (rendezvous.py) or process groups (group.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contract import files


class MembershipError(RuntimeError):
    """The group cannot go on as configured."""


class TooFewWorkers(MembershipError):
    """Fewer workers are left than the run's minimum."""


class Excluded(MembershipError):
    """This worker is not in the new generation (it checked in too late): it must rejoin."""


@dataclass(frozen=True)
class Generation:
    number: int
    members: tuple[str, ...]
    source: int  # the rank whose state every member adopts
    admitted: int  # join requests admitted so far (join ids 1..admitted)
    step: int  # the source's completed steps when the generation formed
    reason: str
    departed: tuple[str, ...] = ()
    joined: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.members)

    def rank_of(self, member: str) -> int:
        if member not in self.members:
            raise Excluded(f"worker {member} is not in generation {self.number}")
        return self.members.index(member)

    def to_json(self) -> str:
        return json.dumps(
            {
                "number": self.number,
                "members": list(self.members),
                "source": self.source,
                "admitted": self.admitted,
                "step": self.step,
                "reason": self.reason,
                "departed": list(self.departed),
                "joined": list(self.joined),
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Generation:
        """Parse a stored generation; anything malformed is a MembershipError, not a crash."""
        try:
            data: Any = files.loads(text)  # nesting too deep for the parser: ValueError
            generation = cls(
                number=int(data["number"]),
                members=tuple(str(m) for m in data["members"]),
                source=int(data["source"]),
                admitted=int(data["admitted"]),
                step=int(data["step"]),
                reason=str(data["reason"]),
                departed=tuple(str(m) for m in data["departed"]),
                joined=tuple(str(m) for m in data["joined"]),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise MembershipError(f"damaged generation record: {err}") from None
        if not 0 <= generation.source < max(1, len(generation.members)):
            raise MembershipError(f"generation {generation.number}: source out of range")
        return generation


def first_generation(join_ids: Sequence[str], admitted: int | None = None) -> Generation:
    """The starting workers, ordered by name with numbers compared as numbers (w2 before
    w10), not by who registered first: rank 0 is w0 locally and <job>-worker-0 on Kubernetes
    (the store's host there), whatever the race to register. `admitted`: the join numbers
    it took (default: one per worker; more where a number held no record of the run's)."""
    members = tuple(sorted(join_ids, key=by_name))
    taken = len(members) if admitted is None else admitted
    return Generation(0, members, 0, taken, 0, "start", joined=members)


def by_name(member: str) -> list[tuple[int, int | str]]:
    """A natural sort key: digit runs compare as numbers."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", member) if p]


def grown(
    current: Generation, joiners: Sequence[str], step: int, admitted: int | None = None
) -> Generation:
    """The members, then `joiners` (the next join requests, in order); `admitted`: the last
    join number taken (default: one more per joiner)."""
    # Ids come from the store: one already taken (or empty) would give two processes one
    # rank of the grown group.
    taken = set(current.members)
    if len(set(joiners)) != len(joiners) or taken.intersection(joiners) or "" in joiners:
        raise MembershipError(f"damaged join records: worker ids {list(joiners)} for a group "
                              f"of {list(current.members)}")  # fmt: skip
    return Generation(
        current.number + 1,
        current.members + tuple(joiners),
        0,
        current.admitted + len(joiners) if admitted is None else admitted,
        step,
        f"{len(joiners)} worker(s) joined",
        joined=tuple(joiners),
    )


def after_failure(current: Generation, steps: Mapping[str, int]) -> Generation:
    """The members that checked in (`steps`: member -> its completed steps), in old order."""
    survivors = tuple(m for m in current.members if m in steps)
    if not survivors:
        raise MembershipError("no worker checked in")
    most = max(steps[m] for m in survivors)
    source = next(i for i, m in enumerate(survivors) if steps[m] == most)
    departed = tuple(m for m in current.members if m not in steps)
    return Generation(
        current.number + 1,
        survivors,
        source,
        current.admitted,
        most,
        f"{', '.join(departed) or 'no worker'} left",
        departed=departed,
    )


def check_size(generation: Generation, min_workers: int, max_workers: int) -> None:
    if generation.world_size < min_workers:
        raise TooFewWorkers(
            f"{generation.world_size} worker(s) left after {generation.reason}; "
            f"the run needs at least {min_workers}"
        )
    if generation.world_size > max_workers:
        raise MembershipError(f"{generation.world_size} workers exceed the maximum {max_workers}")
