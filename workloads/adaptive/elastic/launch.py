"""Where an elastic worker finds its group: the store's endpoint, its own id, how many workers
start, and whether it hosts the store; from `--elastic MIN:MAX` and the environment.

    local (runner/backends/local/supervisor.py): the supervisor hosts a TCPStore at
        MASTER_ADDR:MASTER_PORT and names each worker STACKBENCH_MEMBER (w0, w1, ...);
        WORLD_SIZE is how many it starts (MAX); STACKBENCH_RUN_SECRET signs the group's
        records (signing.py).
    PyTorchJob with an elasticPolicy (training-operator 1.9, pkg/controller.v1/pytorch/
        elastic.go): PET_RDZV_ENDPOINT is <job>-worker-0:<port>; no MASTER_ADDR, RANK or
        WORLD_SIZE is set. The pod whose hostname is the endpoint's host hosts the store, as
        torchrun's c10d rendezvous backend decides; every pod's id is its hostname plus a
        random suffix (a restarted container is a new worker, and must not be mistaken for
        the one that left); MAX pods start (the renderer's replicas).
Not here: the group itself (group.py).
"""

from __future__ import annotations

import datetime
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch.distributed import PrefixStore, Store, TCPStore

from workloads.adaptive.elastic.signing import UNSIGNED, Signer
from workloads.runtime import stores

STORE_PREFIX = "elastic/"
CONNECT_TIMEOUT_S = 300.0


class LaunchError(ValueError):
    """The environment does not say where the group is (a launcher's mistake)."""


@dataclass(frozen=True)
class ElasticLaunch:
    min_workers: int
    max_workers: int
    initial_workers: int
    host: str
    port: int
    member: str
    hosts_store: bool
    signer: Signer = UNSIGNED  # the run's secret, from SECRET_ENV (signing.py)

    @classmethod
    def parse(cls, workers: str, environ: Mapping[str, str]) -> ElasticLaunch:
        low, sep, high = workers.partition(":")
        if not sep or not low.isdigit() or not high.isdigit() or not 1 <= int(low) <= int(high):
            raise LaunchError(f"--elastic takes MIN:MAX with 1 <= MIN <= MAX, got {workers!r}")
        host, port, hosts = _endpoint(environ)
        initial = int(environ.get("WORLD_SIZE", high))
        if not int(low) <= initial <= int(high):
            raise LaunchError(f"WORLD_SIZE={initial} is outside --elastic {workers}")
        member = environ.get("STACKBENCH_MEMBER") or _pod_member(environ)
        try:
            signer = Signer.from_environ(environ)
        except ValueError as err:
            raise LaunchError(str(err)) from None
        return cls(int(low), int(high), initial, host, port, member, hosts, signer)

    def host_store(self) -> TCPStore | None:
        """The store, when this worker hosts it (keep it alive as long as the process)."""
        if not self.hosts_store:
            return None
        return stores.serve(self.host, self.port, CONNECT_TIMEOUT_S)

    def connector(self) -> Callable[[], Store]:
        """Opens a client of the run's store (one per thread that uses it)."""

        def connect() -> Store:
            timeout = datetime.timedelta(seconds=CONNECT_TIMEOUT_S)
            client = TCPStore(self.host, self.port, is_master=False, timeout=timeout)
            return PrefixStore(STORE_PREFIX, client)

        return connect


def _endpoint(environ: Mapping[str, str]) -> tuple[str, int, bool]:
    """(host, port, whether this process hosts the store)."""
    endpoint = environ.get("PET_RDZV_ENDPOINT")
    if endpoint:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise LaunchError(f"PET_RDZV_ENDPOINT={endpoint!r} is not HOST:PORT")
        return host, int(port), _is_this_machine(host)
    if "MASTER_ADDR" not in environ or not environ.get("MASTER_PORT", "").isdigit():
        raise LaunchError(
            "an elastic worker needs MASTER_ADDR and MASTER_PORT (the launcher's store) or "
            "PET_RDZV_ENDPOINT (PyTorchJob's elasticPolicy); start it with `runner submit "
            "--workers MIN:MAX`"
        )
    return environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), False


def _is_this_machine(host: str) -> bool:
    names = {socket.gethostname(), socket.getfqdn(), os.environ.get("HOSTNAME", "")}
    return host in names or host.split(".")[0] == socket.gethostname()


def _pod_member(environ: Mapping[str, str]) -> str:
    return f"{environ.get('HOSTNAME') or socket.gethostname()}.{secrets.token_hex(3)}"
