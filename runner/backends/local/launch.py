"""A local run's worker processes, and the one call that starts a request's processes on its
network (loopback, or a shaped link between network namespaces).

The workers are started directly, one `python -m <workload> ...` per rank, with the variables
torchrun would give them (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; workloads/runtime/dist.py reads nothing else), not under torchrun's agent: the agent is
a process of its own that imports torch before any worker starts and exits 0.2 s after the last
one, 1.2 s and more of every run's start and end for nothing a local run uses (the supervisor
already watches every process, ends the rest at the first failure and reports which failed).
Rank 0 hosts the group's store on MASTER_PORT (torch's env:// rendezvous). A run on Kubernetes
still runs under torchrun, where the agent is the pod's entry (runner/backends/kubernetes/).

What dryrun puts in a LocalRequest (pure, so `--dry-run` shows the exact commands):

    processes = worker_processes(world_size, ("-m", module, *args), env, cwd, port, shaped)
    LocalRequest(run_dir, processes, link=link.text)

What the supervisor does with it:

    with launch(request) as started:         # builds and probes the network (if any)
        for process in request.processes:
            start(process, started, log_path)  # Popen(started.argv(process), env={
                                                 #   **os.environ, **process.env, **started.env})
        ...                                  # wait, cancel, clean up the process tree
    # leaving the block removes the network; a killed supervisor removes it too

`started.env` carries the `network` record for manifest.json (contract/network.py): the link
as measured, or "loopback, unshaped" when the request has no link, and then pins gloo's and
NCCL's sockets to the loopback interface (LOOPBACK_SOCKETS); an elastic run's secret too.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract import files
from contract.files import DamagedFile
from contract.network import ENV, TALLY_FILE, UNSHAPED_LOOPBACK, NetworkRecord
from contract.rundir import LOGS, check_version
from runner.backends.base import LocalRequest, Process
from runner.backends.local.network import (
    INTERFACE,
    MAX_WORKERS,
    ShapedNetwork,
    address,
)
from runner.backends.local.network_check import NetworkUnavailable
from runner.errors import SpecError
from runner.job import threads
from runner.job.link import PARAM, parse_link
from workloads.runtime import lifetime

if TYPE_CHECKING:
    from runner.job.spec import JobSpec, Placement

LAUNCH_FILE = "launch.json"  # in the run directory: the request the supervisor runs, as made
LOOPBACK = "127.0.0.1"
# Unshaped, the collectives' own sockets on the loopback interface too: gloo and NCCL would
# otherwise listen on the address this machine's name resolves to (a LAN address on most
# machines; NCCL's default even leaves `lo` out). Shaped, gloo is pinned to the link instead.
LOOPBACK_SOCKETS = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
# Inside worker 0's namespace, which nothing else uses: this port is always free there.
SHAPED_MASTER_PORT = 29500
# A local run starts at most this many processes (runner/job/target.py's LOCAL_MAX_WORKERS,
# not imported: the supervisor reads a request without the job registry).
MAX_PROCESSES = 1024


def check_placement(device: str) -> None:
    """SpecError when a shaped link would not shape the run's traffic."""
    if device != "cpu":
        raise SpecError(
            PARAM,
            "shapes gloo's traffic between CPU workers; GPUs of one machine talk through NCCL's "
            "peer-to-peer and shared-memory paths, which no link shapes; use --device cpu",
        )


def free_port() -> int:
    """A port free on the loopback address now (a process binds it a moment later; if
    another program takes it in between, that process fails with a line that says so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def workload_entry(spec: JobSpec, run_dir: Path) -> tuple[str, ...]:
    """What every worker of `spec` runs after the interpreter: the workload's module and its
    arguments, writing into `run_dir` (fixed ranks and elastic members alike)."""
    # Here, not at the top: the supervisor imports this module and needs no job registry.
    from runner.job.spec import workload_args, workload_module

    return (
        "-m", workload_module(spec),
        *workload_args(spec, output_dir=str(run_dir), log_dir=str(run_dir / LOGS)),
    )  # fmt: skip


def thread_env(placement: Placement) -> dict[str, str]:
    """Every worker's intra-op threads: what the run recorded (runner/job/threads.py; the
    user's OMP_NUM_THREADS was read into it when it was resolved), else, for a run recorded
    before it said, one share of the cores per worker."""
    per_worker = placement.threads_per_worker or threads.default(placement.world_size)
    return {threads.ENV: str(per_worker)}


def worker_processes(
    world_size: int,
    entry: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    master_port: int,
    shaped: bool = False,
    python: str = sys.executable,
) -> tuple[Process, ...]:
    """Rank i's process, for each of `world_size` ranks, with torchrun's variables.
    `entry` is what it runs (("-m", "workloads.train", "--config", ...)). Unshaped, the ranks
    share the loopback address; shaped, rank i runs in worker namespace i (one rank per
    "node"), gloo bound to its shaped interface, and the store is at worker 0's address."""
    master = address(0) if shaped else LOOPBACK
    group = {"WORLD_SIZE": str(world_size), "MASTER_ADDR": master, "MASTER_PORT": str(master_port)}
    if shaped:
        group["GLOO_SOCKET_IFNAME"] = INTERFACE
    return tuple(
        Process(
            argv=(python, *entry),
            env={**env, **group, "RANK": str(rank), **_local(rank, world_size, shaped)},
            cwd=cwd,
            netns=rank if shaped else None,
        )
        for rank in range(world_size)
    )


def _local(rank: int, world_size: int, shaped: bool) -> dict[str, str]:
    """LOCAL_RANK and LOCAL_WORLD_SIZE: a shaped rank is alone in its namespace ("node")."""
    if shaped:
        return {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    return {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world_size)}


@dataclass(frozen=True)
class Started:
    """How to start each process of a request on its network, and what every process gets."""

    network: ShapedNetwork | None
    record: NetworkRecord
    # Given to every process at its start, never written to launch.json (a secret's place).
    run_env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, process: Process) -> list[str]:
        if process.netns is None:
            return list(process.argv)
        if self.network is None:
            raise ValueError(f"{process.argv[:3]} names a namespace, but the request has no link")
        return self.network.command(process.netns, process.argv, process.cwd)

    @property
    def env(self) -> dict[str, str]:
        pinned = LOOPBACK_SOCKETS if self.network is None else {}
        return {**pinned, **self.run_env, ENV: self.record.to_env()}

    def broken(self, settle_s: float = 0.0) -> str | None:
        """Why the run's network stopped carrying anything (None: it carries, or there is none
        to break: loopback). `settle_s`: how long to wait for a holder's end to show, after a
        rank's: a namespace's init killed takes its rank down a moment before its holder."""
        if self.network is None:
            return None
        deadline = time.monotonic() + settle_s
        while (why := self.network.broken()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return why


def start(process: Process, started: Started, log_path: Path) -> subprocess.Popen[bytes]:
    """Start `process` on the request's network, its output appended to `log_path`; it dies
    with the caller (the supervisor: a run's worker, or one that joins it). OSError when it
    cannot start (its log a link, its directory or program gone): `start_failure` says it."""
    parent = os.getpid()
    # Never through a link: a planted logs/ or launcher log would take the output elsewhere.
    with os.fdopen(files.open_append(log_path), "ab") as log:
        try:
            return subprocess.Popen(
                started.argv(process), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env={**os.environ, **process.env, **started.env},
                cwd=process.cwd, preexec_fn=lambda: lifetime.die_with_parent(parent),
            )  # fmt: skip
        except subprocess.SubprocessError as err:
            # The child failed before its program ran (its parent-death signal could not be
            # armed) and is reaped: a failed start like the others, said in one line.
            raise OSError(errno.EAGAIN, f"cannot prepare the process ({err})") from None
        except MemoryError:  # the fork's bookkeeping, at a memory limit
            raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM)) from None


def start_failure(err: OSError) -> str:
    """Why `start` failed, in one line that names its file: `path: what the system said`."""
    what = err.strerror or str(err)
    return f"{err.filename}: {what}" if err.filename else what


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
        net.tally_path = Path(request.run_dir) / TALLY_FILE  # what the links did, at the end
        try:
            record = net.probe()
        except ProbeError as err:
            raise NetworkUnavailable(f"the shaped network is not as asked: {err}") from err
        yield Started(net, record)


def digest(data: bytes) -> str:
    """The digest of launch.json's bytes that submit hands the supervisor (on its argv)."""
    return hashlib.sha256(data).hexdigest()


def read_request(run_dir: Path, expected_digest: str) -> LocalRequest:
    """The request in `run_dir`'s launch.json, exactly as submit wrote it (`expected_digest`,
    its bytes' digest), every field's type and range checked: anyone who may write the run
    directory could rewrite the file between submit's write and this read, and the supervisor
    would run their command; and a damaged file must be the run's one-line failure, not a
    TypeError. The bytes checked are the bytes parsed (read once). DamagedFile (naming the
    file) when it is not that request or not one this backend can run; FileNotFoundError
    when it is missing."""
    path = run_dir / LAUNCH_FILE
    raw = files.read_bytes(path)
    if digest(raw) != expected_digest:
        raise DamagedFile(
            path, "is not the request `runner submit` wrote (changed since); submit the run again"
        )
    data = files.parse_json_object(path, raw)
    check_version(data, path)
    entries = data.get("processes")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PROCESSES:
        raise DamagedFile(path, f"has no list of 1 to {MAX_PROCESSES} processes")
    procs = tuple(_process(entry, i, path) for i, entry in enumerate(entries))
    link = _link(data.get("link"), procs, path)
    store_port = _whole(data, "store_port", 1, 65535, path)
    min_workers = _whole(data, "min_workers", 1, len(procs), path)
    run_dir_field = data.get("run_dir")
    if not isinstance(run_dir_field, str):
        raise DamagedFile(path, "field 'run_dir' is not text")
    return LocalRequest(run_dir_field, procs, link, store_port, min_workers)


def _process(entry: Any, index: int, path: Path) -> Process:
    """Process `index` of launch.json, as Popen can start it (text the system takes, no `=`
    in a variable's name: Popen raises ValueError otherwise)."""
    where = f"process {index}"
    if not isinstance(entry, dict):
        raise DamagedFile(path, f"{where} is not an object")
    argv, env, cwd = entry.get("argv"), entry.get("env"), entry.get("cwd")
    if not isinstance(argv, list) or not argv or not all(_plain(a) for a in argv):
        raise DamagedFile(path, f"{where} has no command line (a non-empty list of text)")
    if not isinstance(env, dict) or not all(
        _plain(k) and k and "=" not in k and _plain(v) for k, v in env.items()
    ):
        raise DamagedFile(path, f"{where} has an env that is not names to text")
    if not _plain(cwd) or not cwd:
        raise DamagedFile(path, f"{where} has no working directory")
    netns = _whole(entry, "netns", 0, MAX_WORKERS - 1, path, where)
    return Process(tuple(argv), dict(env), cwd, netns)


def _link(link: Any, procs: Sequence[Process], path: Path) -> str | None:
    """The request's link, if it has one: a rate parse_link takes, and then every process in
    a namespace (and none in one without it)."""
    if link is None:
        if any(p.netns is not None for p in procs):
            raise DamagedFile(path, "names network namespaces but no link")
        return None
    if not isinstance(link, str):
        raise DamagedFile(path, "field 'link' is not text")
    try:
        parse_link(link)
    except SpecError as err:
        raise DamagedFile(path, f"has a link that is not a rate ({err})") from None
    if any(p.netns is None for p in procs):
        raise DamagedFile(path, "has a link but a process outside its namespaces")
    return link


def _whole(
    data: Mapping[str, Any], key: str, low: int, high: int, path: Path, where: str = ""
) -> int | None:
    """An optional integer field within low..high (a bool is not one)."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        owner = f"{where}'s " if where else ""
        raise DamagedFile(path, f"{owner}field {key!r} is not an integer {low}..{high} ({shown})")
    return value


def _plain(value: Any) -> bool:
    """Text the system takes as an argument: no NUL byte, and nothing os.fsencode refuses
    (JSON's "\\ud800", a lone surrogate, raised UnicodeEncodeError in Popen)."""
    if not isinstance(value, str):
        return False
    try:
        return b"\0" not in os.fsencode(value)
    except UnicodeError:
        return False
