"""The Backend protocol: one run lifecycle, whatever runs the job (as torchx's schedulers).

    request = backend.dryrun(spec, run_dir)   # the exact thing that will run; nothing runs
    handle  = backend.handle(request)         # known before anything starts: job.json has it
    backend.submit(request)                   # runs exactly that
    backend.status(handle) / watch(handle) / events(handle) / logs(handle, rank, follow)
    backend.fetch(handle, run_dir)            # results home; what is still missing
    backend.cancel(handle)                    # idempotent

`runner.api` drives it the same way for every backend (submit, follow, fetch) and never asks
which backend it has; runner/backends/factory.py alone builds them.
Handles are URLs: `local://<run-id>`, `k8s://<namespace>/<name>`.
Job states and their record are the run directory's (contract/rundir.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from contract.rundir import JobStatus

if TYPE_CHECKING:  # the local supervisor reads a request without the job registry
    from runner.job.spec import JobSpec

LOCAL_SCHEME = "local://"  # a local run's handle: this, then its run directory's name
KUBERNETES_SCHEME = "k8s"  # a cluster run's handle: k8s://<namespace>/<job name, its run id>


def kubernetes_handle(namespace: str, name: str) -> str:
    return f"{KUBERNETES_SCHEME}://{namespace}/{name}"


def parse_kubernetes_handle(handle: str) -> tuple[str, str] | None:
    """(namespace, job name) of a Kubernetes handle; None for anything else."""
    url = urlparse(handle)
    name = url.path.strip("/")
    if url.scheme != KUBERNETES_SCHEME or not url.netloc or not name or "/" in name:
        return None
    return url.netloc, name


@dataclass(frozen=True)
class Process:
    """One command the local backend starts: argv, the variables it sets on top of the
    supervisor's environment (never the whole environment: it may hold secrets), its working
    directory and, for shaped-network runs, the index of the network namespace it runs in."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = "."
    netns: int | None = None


@dataclass(frozen=True)
class LocalRequest:
    run_dir: str
    processes: tuple[Process, ...]
    # Shaped-network runs: the link every worker gets ("100mbit"); None: plain loopback.
    link: str | None = None
    # Elastic runs (--workers MIN:MAX): the port on 127.0.0.1 where the supervisor hosts the
    # workers' store (workloads/adaptive/elastic/launch.py); the run goes on while MIN of its
    # processes (MAX) are left, rather than ending at the first that fails.
    store_port: int | None = None
    min_workers: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """launch.json; read back by runner/backends/local/launch.py's read_request, which
        checks every field, since the file may have been damaged since."""
        return {"schema_version": 1, **asdict(self)}


@dataclass(frozen=True)
class KubernetesRequest:
    run_dir: str
    manifest: Mapping[str, Any]


Request = LocalRequest | KubernetesRequest


class Backend(Protocol):
    """Where jobs run. Every method after submit takes the handle submit returned."""

    name: str  # "local" or "kubernetes", recorded in job.json
    # Whether a run's results reach its run directory only through fetch (a cluster's results
    # store); False: the run writes them there itself, as it goes (local).
    fetches_results: bool

    @property
    def reference(self) -> Mapping[str, Any] | None:
        """What job.json records to reach this backend again (no secrets); None for local."""
        ...

    def dryrun(self, spec: JobSpec, run_dir: Path) -> Request:
        """The exact request submit would run for `spec` in `run_dir`; starts nothing and
        writes nothing, so it serves `--dry-run` too. Raises SpecError for what the backend
        cannot run (checked before anything starts)."""
        ...

    def describe(self, request: Request) -> str:
        """The request as a person reads it: the command lines, or the manifest's YAML."""
        ...

    def handle(self, request: Request) -> str:
        """The handle `request` will have once submitted, known before it starts, so that the
        run's record names it before any workload can run (and a failed submit still does)."""
        ...

    def submit(self, request: Request) -> str:
        """Start exactly `request` (job.json, with handle(request), is already in its run
        directory); returns that handle."""
        ...

    def status(self, handle: str) -> JobStatus: ...

    def listed_status(self, handle: str) -> JobStatus:
        """The state `runner runs` lists, without waiting on a network: a local run's is
        asked of its supervisor (cheap, and it notices a dead one); a cluster run's is the
        last one recorded (`status` asks the cluster)."""
        ...

    def watch(self, handle: str) -> Iterator[JobStatus]:
        """Each new status as it changes, until (and including) a finished one."""
        ...

    def events(self, handle: str) -> Iterator[list[dict[str, Any]]]:
        """Batches of the run's new events as they appear (an empty batch when there are
        none yet), for as long as the caller keeps asking."""
        ...

    def logs(self, handle: str, rank: int, follow: bool) -> Iterator[str]:
        """Lines of one rank's log (without newlines); with follow, until the job ends."""
        ...

    def fetch(self, handle: str, dest: Path) -> list[str]:
        """Bring the results into dest (the run directory); returns what is still missing."""
        ...

    def cancel(self, handle: str) -> None:
        """Stop the job; idempotent, and a no-op on a finished job."""
        ...

    def join(self, handle: str) -> str:
        """Start one more worker in a running elastic job (`runner join`); what started, in a
        line. RunnerError, one line, when it cannot (not running, at MAX, not supported)."""
        ...

    def release(self, handle: str) -> None:
        """Let the run go on after this process ends (a detached or fully followed run); a
        local run is otherwise cancelled when the process that submitted it ends
        (runner/backends/local/leash.py). Nothing ties a cluster job to a process."""
        ...

    def close(self) -> None:
        """Release what the backend holds (credentials written to disk, connections)."""
        ...
