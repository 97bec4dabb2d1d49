"""An elastic local run (`runner submit --workers MIN:MAX`): its processes and its store.

The workers are started directly, one `python -m workloads.train ... --elastic MIN:MAX` each,
not under torchrun: torchrun's elastic agent restarts every worker on a membership change,
and the state would die with them (docs/adaptive-elastic.md). Each is told where the
group's store is and its name (workloads/adaptive/elastic/launch.py):

    MASTER_ADDR=127.0.0.1 MASTER_PORT=<store_port> WORLD_SIZE=<MAX> STACKBENCH_MEMBER=w<i>

The supervisor hosts that store (`hosted_store`, on 127.0.0.1 alone) for as long as it runs
the request, so it outlives every worker, and adds the run's secret to each worker's
environment when it starts it (STACKBENCH_RUN_SECRET: not in launch.json, so not in the dry
run either; workloads/adaptive/elastic/signing.py); it goes on while workers are left and
decides the outcome from the exit codes (outcome.elastic_outcome). `runner join` asks it
(joins.py) for one more worker, w<n>, which it starts and owns like the others
(`joiner_process`). The store's port is chosen when the request is made, so `--dry-run`
shows the exact commands; if another program takes it in between, the run fails with a
line that says so.
Not here: the group's mechanism (workloads/adaptive/elastic/), the supervisor's loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends.base import Process
from runner.backends.local import launch

if TYPE_CHECKING:
    from runner.job.spec import JobSpec
    from workloads.adaptive.elastic.rendezvous import Rendezvous

STORE_TIMEOUT_S = 300.0
WRITER = "w0"  # the worker that writes the run's record (elastic_processes names it)


class StoreUnavailable(RuntimeError):
    """The supervisor cannot host the elastic run's store (one line)."""


def elastic_processes(spec: JobSpec, run_dir: Path, store_port: int) -> tuple[Process, ...]:
    """MAX workers, w0 ... w<MAX-1>, each its own process on the supervisor's store."""
    max_workers = spec.placement.world_size
    argv = (sys.executable, *launch.workload_entry(spec, run_dir))
    common = {**launch.thread_env(spec.placement), "MASTER_ADDR": launch.LOOPBACK,
              "MASTER_PORT": str(store_port), "WORLD_SIZE": str(max_workers)}  # fmt: skip
    return tuple(
        Process(argv=argv, env={**common, "STACKBENCH_MEMBER": f"w{i}"}, cwd=str(run_dir))
        for i in range(max_workers)
    )


def joiner_process(template: Process, index: int) -> Process:
    """Worker w<index>, which joins the running run (`runner join`): a starting worker's
    command and environment but for its name; it registers after the start, so the group
    admits it at a decision point (workloads/adaptive/elastic/group.py)."""
    return dataclasses.replace(template, env={**template.env, "STACKBENCH_MEMBER": f"w{index}"})


class WriterWatch:
    """Whether the writer (w0) of an elastic run is frozen past the run's end: the run was
    said ended in the store (by the writer itself when it closes, or by a survivor that saw
    it leave: workloads/adaptive/elastic/session.py) and w0's heartbeat has not moved since,
    while its process lives on (SIGSTOPped, a debugger, a paused VM). Nobody else would end
    such a run: the survivors exit, and the supervisor waits on worker 0."""

    def __init__(self, rendezvous: Rendezvous | None, env: dict[str, str] | None = None) -> None:
        self._rdzv = rendezvous
        # What every worker's environment adds: the run's secret (never in launch.json).
        self.env = env or {}
        self._count: int | None = None  # w0's heartbeat counter when last seen to move
        self._since = 0.0  # when it was (monotonic)

    def frozen(self, quiet_s: float) -> bool:
        """The run ended and w0's heartbeat has been still for `quiet_s` since it did."""
        if self._rdzv is None:
            return False
        try:
            if not self._rdzv.ended():
                return False
            count = self._rdzv.heartbeat_count(WRITER)
        except (RuntimeError, ValueError):  # a damaged counter: the exit codes still decide
            return False
        now = time.monotonic()
        if count != self._count:
            self._count, self._since = count, now
        return now - self._since >= quiet_s

    def close(self) -> None:
        self._rdzv = None


@contextlib.contextmanager
def hosted_store(port: int | None) -> Iterator[WriterWatch]:
    """The elastic run's store on 127.0.0.1:port while the block runs (nothing for None),
    and a watch on its writer through it, which holds the run's secret: a new one, which
    signs the group's records (workloads/adaptive/elastic/signing.py), for the workers'
    environment only."""
    if port is None:
        yield WriterWatch(None)
        return
    # Only an elastic run's supervisor pays for torch.
    from torch.distributed import PrefixStore

    from workloads.adaptive.elastic.launch import STORE_PREFIX
    from workloads.adaptive.elastic.rendezvous import Rendezvous
    from workloads.adaptive.elastic.signing import SECRET_ENV, Signer, new_secret
    from workloads.runtime import stores

    try:  # on loopback alone (torch's own choice would be every interface)
        store = stores.serve(launch.LOOPBACK, port, STORE_TIMEOUT_S)
    except (RuntimeError, OSError) as err:
        raise StoreUnavailable(
            f"cannot host the elastic workers' store on {launch.LOOPBACK}:{port} ({err}); "
            "submit the run again (another program took the port)"
        ) from None
    secret = new_secret()
    rendezvous = Rendezvous(PrefixStore(STORE_PREFIX, store), "supervisor", Signer(secret))
    watch = WriterWatch(rendezvous, {SECRET_ENV: secret})
    try:
        yield watch
    finally:
        watch.close()  # its client holds the store too: the server must go with the block
        del store
