"""A real-time scheduling priority for the one thread that calls it, where this process may
have one (root), for the few threads whose wake-up time is what is measured or made: a delay
line's reader (delayline.py), the probe's round trips and the two ends of its stream
(probe.py).

On a loaded machine a normal thread woke 0.2-0.5 ms late for each packet it waited on, and
a 3 ms delay measured 3.45 ms one way. These threads never spin (they sleep in select() or a
blocking read or write), so they cannot starve the machine; the probe's stream keeps a core
busy only on a link faster than the machine carries, and for under a second. Without the
privilege they run as they are, and the probe says when the delay is then off.

Not here: anything that decides when a packet leaves.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

PRIORITY = 10  # of 1-99: above every normal thread, below the kernel's own threads (50)


def prefer_this_thread() -> bool:
    """Run the calling thread (only it: Linux takes pid 0 as the calling thread) at PRIORITY
    under SCHED_FIFO; False when not allowed. SCHED_RESET_ON_FORK: a process it starts (a
    worker) runs as a normal one."""
    try:
        policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        os.sched_setscheduler(0, policy, os.sched_param(PRIORITY))
    except (OSError, AttributeError):
        return False
    return True


@contextlib.contextmanager
def preferred() -> Iterator[None]:
    """The calling thread at PRIORITY for the block, then at its own policy again."""
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    except (OSError, AttributeError):
        yield
        return
    raised = prefer_this_thread()
    try:
        yield
    finally:
        if raised:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, policy, param)
