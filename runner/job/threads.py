"""How many intra-op CPU threads each worker of a local run gets, and whether the workers'
threads fit the cores this process may run on.

A scaling study must hold each worker's resources constant: one worker with the whole
machine's threads against two with half each measures the thread pool, not data parallelism
(issue 33: 13x "speedup" at 2 workers on a shared 2-core machine, from one worker's
2-thread steps waiting for a busy core). So a run records its threads per worker
(Placement.threads_per_worker, in job.json), the local launcher gives every worker exactly
that (OMP_NUM_THREADS), `runner sweep` gives every cell the same, and a report computes
speedups only between runs with equal threads per worker.

Is not: the workload's own cap (execution.max_cpu_threads lowers a process's threads, never
raises them), nor anything about a cluster, whose pods get what their launcher gives.
"""

from __future__ import annotations

import os

ENV = "OMP_NUM_THREADS"  # what torch (and every OpenMP runtime) reads at start
MAX_THREADS = 1024


def cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or taskset's
    cpuset, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def share(workers: int) -> int:
    """An equal share of the cores for each of `workers` workers, at least one thread."""
    return max(1, cores() // max(1, workers))


def from_environ(environ: dict[str, str] | None = None) -> int | None:
    """The user's own OMP_NUM_THREADS, when it is a whole number in range (else None: an
    unusable value is not the user's choice of threads, and OpenMP itself would ignore it)."""
    text = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not text.isdigit():
        return None
    threads = int(text)
    return threads if 1 <= threads <= MAX_THREADS else None


def default(workers: int) -> int:
    """Threads per worker when the user names none: the OMP_NUM_THREADS they set, else an
    equal share of the cores (a single run has the machine to itself)."""
    return from_environ() or share(workers)


def oversubscribed(workers: int, threads_per_worker: int) -> str | None:
    """One line when the workers' threads are more than the cores they run on (None: they
    fit): each thread then waits for a core, and a step's time measures the machine."""
    available = cores()
    total = workers * threads_per_worker
    if total <= available:
        return None
    thread_s = "thread" if threads_per_worker == 1 else "threads"
    core_s = "core" if available == 1 else "cores"
    fix = (
        f"--threads {max(1, available // workers)}"
        if workers <= available
        else f"at most {available} workers"
    )
    return (
        f"{workers} {'worker' if workers == 1 else 'workers'} x {threads_per_worker} "
        f"{thread_s} = {total} threads on {available} {core_s}: workers wait for cores, so step "
        f"times measure this machine more than the run ({fix} fits)"
    )
