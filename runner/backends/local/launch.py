"""A shaped local run's commands, and the one call that starts a request's processes on its
network: one torchrun agent per worker namespace, joined at worker 0's address.

What dryrun puts in a LocalRequest (pure, so `--dry-run` shows the exact commands):

    processes = worker_processes(num_workers, procs_per_worker, ("-m", module, *args), env, cwd)
    LocalRequest(run_dir, processes, link=link.text)

What the supervisor does with it:

    with launch(request) as started:         # builds and probes the network (if any)
        for process in request.processes:
            Popen(started.argv(process), env={**os.environ, **process.env, **started.env},
                  cwd=process.cwd, ...)
        ...                                  # wait, cancel, clean up the process tree
    # leaving the block removes the network; a killed supervisor removes it too

`started.env` carries the `network` record for manifest.json (contract/network.py): the link
as measured, or "loopback, unshaped" when the request has no link.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from contract.network import ENV, UNSHAPED_LOOPBACK, NetworkRecord
from runner.backends.base import LocalRequest, Process
from runner.backends.local.network import (
    INTERFACE,
    NetworkUnavailable,
    ShapedNetwork,
    address,
)
from runner.errors import SpecError
from runner.job.link import PARAM, parse_link

# Inside worker 0's namespace, which nothing else uses: this port is always free there.
MASTER_PORT = 29500
# How often torchrun's agent looks at its workers: how soon after the last one exits it sees
# the run is done (its default, 5 s, would be the run's end-to-outcome time; a look is one
# waitpid per worker, nothing at this rate).
MONITOR_OPTION = "--monitor-interval=0.02"


def check_placement(device: str) -> None:
    """SpecError when a shaped link would not shape the run's traffic."""
    if device != "cpu":
        raise SpecError(
            PARAM,
            "shapes gloo's traffic between CPU workers; GPUs of one machine talk through NCCL's "
            "peer-to-peer and shared-memory paths, which no link shapes; use --device cpu",
        )


def worker_processes(
    num_workers: int,
    procs_per_worker: int,
    entry: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    python: str = sys.executable,
) -> tuple[Process, ...]:
    """Worker i's torchrun agent, in namespace i: static rendezvous at worker 0's address,
    gloo bound to the worker's shaped interface. `entry` is what torchrun runs
    (("-m", "workloads.train", "--config", ...))."""
    return tuple(
        Process(
            argv=(
                python,
                "-m",
                "runner.backends.local.torchrun",
                *_torchrun_options(num_workers, i, procs_per_worker),
                *entry,
            ),
            env={**env, "GLOO_SOCKET_IFNAME": INTERFACE},
            cwd=cwd,
            netns=i,
        )
        for i in range(num_workers)
    )


def _torchrun_options(num_workers: int, node_rank: int, procs_per_worker: int) -> list[str]:
    return [
        f"--nnodes={num_workers}", f"--node-rank={node_rank}",
        f"--nproc-per-node={procs_per_worker}",
        f"--master-addr={address(0)}", f"--master-port={MASTER_PORT}",
        MONITOR_OPTION,
    ]  # fmt: skip


@dataclass(frozen=True)
class Started:
    """How to start each process of a request on its network, and what every process gets."""

    network: ShapedNetwork | None
    record: NetworkRecord

    def argv(self, process: Process) -> list[str]:
        if process.netns is None:
            return list(process.argv)
        if self.network is None:
            raise ValueError(f"{process.argv[:3]} names a namespace, but the request has no link")
        return self.network.command(process.netns, process.argv, process.cwd)

    @property
    def env(self) -> dict[str, str]:
        return {ENV: self.record.to_env()}


@contextlib.contextmanager
def launch(request: LocalRequest) -> Iterator[Started]:
    """The request's network, built and measured, for as long as the block runs.

    NetworkUnavailable (one line) when it cannot be built or carries nothing."""
    if request.link is None:
        yield Started(None, UNSHAPED_LOOPBACK)
        return
    from runner.backends.local.probe import ProbeError

    indices = {p.netns for p in request.processes if p.netns is not None}
    if not indices:
        raise ValueError("a request with a link runs its processes in namespaces (Process.netns)")
    with ShapedNetwork.open(parse_link(request.link), max(indices) + 1) as net:
        try:
            record = net.probe()
        except ProbeError as err:
            raise NetworkUnavailable(f"the shaped network carries nothing: {err}") from err
        yield Started(net, record)
