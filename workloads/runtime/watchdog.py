"""A collective that never completes ends the process, in one line, within its timeout.

The process group's timeout (`dist_timeout_s`) bounds only gloo's own waits on the network:
a recv that waits longer raises. It does not bound a wait on a collective that never starts,
or on a future nothing will complete: torch's PowerSGD hook waits, inside a completion
callback on one of gloo's worker threads, for an all-reduce queued behind those same threads
(both blocked so, the queue never moves), and DDP's reducer then waits for the hook's future
for ever, deaf to the timeout. A run would sit there indefinitely, billing a cluster's GPUs.

So every collective a strategy issues (workloads/strategies/base.py's Collectives, DDP's
hook futures) is timed here, and a thread ends the process when collectives are outstanding
and none of them has completed for longer than the timeout and a grace (gloo's own error
comes first where gloo can raise one; `timeout_reason` turns that error into the same line):
it prints
`stackbench: rank 0: collective timed out after 30 s in the gradient all-reduce, at epoch 1,
step 12`, the line the supervisor takes as the run's reason, and exits STALLED_EXIT at once
(the blocked threads would hold a normal exit too). Only time spent waiting on a collective
counts, never compute: a slow step is no stall. Nor is a queue: DDP issues its buckets
together and gloo runs them a few at a time, so on a slow --link the last bucket waits behind
the others for longer than the timeout while every one of them moves. A collective's wait is
therefore timed from the later of its issue and the last completion of any collective of this
process: a queue that moves is progress, one where nothing completes is a stall.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

STALLED_EXIT = 1  # a failed run (README, "Exit codes")
# Past the timeout, so that gloo raises first where it can (with the op it timed out in).
GRACE_S = 5.0


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rank: int | None = None  # None: not armed, nothing is timed
        self.timeout_s = 0.0
        self.place = "the start of the run"  # where the run is (the training loop says)
        self.pending: dict[int, tuple[float, str]] = {}  # token: (since, what)
        self.last_done = 0.0  # when a collective of this process last completed (monotonic)
        self.thread: threading.Thread | None = None


_STATE = _State()
_TOKENS = itertools.count()
_WHAT = "stackbench_collective"  # the attribute naming the collective a timeout error was in


def arm(rank: int, timeout_s: float) -> None:
    """Time this process's collectives from now on (`timeout_s`: the process group's)."""
    with _STATE.lock:
        _STATE.rank, _STATE.timeout_s = rank, timeout_s
        _STATE.pending.clear()
        _STATE.last_done = 0.0
        if _STATE.thread is None:
            _STATE.thread = threading.Thread(target=_watch, name="stackbench-watchdog", daemon=True)
            _STATE.thread.start()


def disarm() -> None:
    with _STATE.lock:
        _STATE.rank = None
        _STATE.pending.clear()


def at(place: str) -> None:
    """Where the run is, for the line that says where it stalled ("epoch 1, step 12")."""
    _STATE.place = place


@contextmanager
def collective(what: str) -> Iterator[None]:
    """A blocking collective (`what`: "an all-reduce"), timed while it runs."""
    token = _begin(what)
    try:
        with naming(what):
            yield
    finally:
        _end(token)


@contextmanager
def naming(what: str) -> Iterator[None]:
    """Code that waits on collectives timed elsewhere (DDP's backward waits on its hooks'
    futures): a timeout error out of it says it was in `what`, unless an inner one did."""
    try:
        yield
    except RuntimeError as err:
        if _is_timeout(err) and not hasattr(err, _WHAT):
            setattr(err, _WHAT, what)
        raise


def track(future: torch.futures.Future[Any], what: str) -> None:
    """A collective's future, timed until it completes (its callbacks included)."""
    token = _begin(what)
    future.add_done_callback(lambda _: _end(token))


def timeout_reason(err: BaseException) -> str | None:
    """The run's one-line reason when `err` is gloo's timeout of a collective, else None."""
    if not (isinstance(err, RuntimeError) and _is_timeout(err)):
        return None
    return _reason(getattr(err, _WHAT, "a collective"))


def _begin(what: str) -> int:
    token = next(_TOKENS)
    if _STATE.rank is not None:
        _STATE.pending[token] = (time.monotonic(), what)  # one dict write: atomic under the GIL
    return token


def _end(token: int) -> None:
    # Progress first, then the token: a watcher that still sees the token in its copy then
    # reads this completion as well (see _watch), never an old one.
    _STATE.last_done = time.monotonic()
    _STATE.pending.pop(token, None)


def _is_timeout(err: RuntimeError) -> bool:
    # gloo: "Timed out waiting 3000ms for recv operation to complete", possibly inside DDP's
    # "Got the following error when running the callback: ..."; the store: "Timed out after
    # 3 seconds waiting for clients"; NCCL: "... before timing out". Only torch.distributed's
    # own: another timeout (a file lock's, a loader's) is no collective's, and is left alone.
    text = str(err).lower()
    if not any(word in text for word in ("timed out", "timing out", "timeout")):
        return False
    return isinstance(err, dist.DistError) or any(word in text for word in _C10D_WORDS)


# Words that only torch.distributed's errors carry (for a timeout not raised as a DistError).
_C10D_WORDS = ("gloo", "nccl", "recv operation", "send operation", "waiting for clients")


def _reason(what: str) -> str:
    if _STATE.rank is None:  # not armed: only gloo's own timeout, whose value it knows
        return f"collective timed out in {what}, at {_STATE.place}"
    # The way out too: on a slow --link one big collective (a bucket of tens of MB) may need
    # longer than the timeout, which bounds a collective's wait from the last completion.
    return (
        f"rank {_STATE.rank}: collective timed out after {_STATE.timeout_s:g} s in {what}, "
        f"at {_STATE.place} (a peer stopped, or it needs longer: --set dist_timeout_s=SECONDS)"
    )


def _watch() -> None:
    while True:
        with _STATE.lock:
            rank, limit_s = _STATE.rank, _STATE.timeout_s + GRACE_S
            # A copy in one C call: gloo's threads end tokens without the lock.
            pending = list(_STATE.pending.values()) if rank is not None else []
        # Read after the copy: a collective that completed since is counted as progress.
        last_done = _STATE.last_done
        oldest = min(pending, default=None)
        if oldest is not None and time.monotonic() - max(oldest[0], last_done) > limit_s:
            _stalled(oldest[1])
        time.sleep(max(0.05, min(1.0, limit_s / 20)) if rank is not None else 0.5)


def _stalled(what: str) -> None:
    """End the process now: its main thread is blocked in C++, and so would be its exit."""
    # Straight to fd 1 (the rank's log, dist.redirect_output, or the launcher's): the
    # blocked main thread may hold sys.stdout's lock.
    os.write(1, f"stackbench: {_reason(what)}\n".encode())
    os._exit(STALLED_EXIT)
