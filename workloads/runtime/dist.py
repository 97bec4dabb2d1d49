"""Process-group life cycle from the standard torchrun environment, and per-rank log files.

Reads only RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so one image runs
under a local `runner submit` (which sets them itself), torchrun, a Kubeflow TrainJob or
PyTorchJob, or anything else that speaks torchrun.
"""

from __future__ import annotations

import datetime
import gc
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from contract import files
from workloads.runtime import stores, watchdog


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int

    @classmethod
    def from_environ(cls) -> DistEnv:
        missing = [
            k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ
        ]
        if missing:
            raise SystemExit(
                f"workloads.train: missing {', '.join(missing)}; launch it with torchrun "
                "(torchrun --nproc-per-node N -m workloads.train ...) or `runner submit`"
            )
        return cls(
            rank=int(os.environ["RANK"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            world_size=int(os.environ["WORLD_SIZE"]),
        )


def select_device(requested: str, env: DistEnv) -> torch.device:
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("workloads.train: --device cuda but no CUDA device is visible")
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init(device: torch.device, timeout_s: float) -> str:
    """Join the process group (from the env:// variables); returns the backend name."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    device_id = device if device.type == "cuda" else None  # None: the default, no device bound
    timeout = datetime.timedelta(seconds=timeout_s)
    with watchdog.naming("the rendezvous of the process group"):  # a peer that never came
        store = _group_store(timeout_s)
        if store is None:
            dist.init_process_group(backend, timeout=timeout, device_id=device_id)
        else:
            dist.init_process_group(
                backend, store=store, rank=int(os.environ["RANK"]),
                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout, device_id=device_id,
            )  # fmt: skip
    # The timeout bounds gloo's waits on the network only; the watchdog bounds every wait on
    # a collective (an elastic run's session bounds its own waits).
    watchdog.arm(dist.get_rank(), timeout_s)
    return backend


def _group_store(timeout_s: float) -> dist.Store | None:
    """The group's store, rank 0 hosting it on MASTER_ADDR alone (workloads/runtime/stores.py), when
    MASTER_ADDR is an address (a local run: loopback, or worker 0's namespace address on a
    shaped link); None to leave it to torch's env:// rendezvous: under torchrun's agent,
    which hosts the store itself (TORCHELASTIC_USE_AGENT_STORE), or for a name."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or stores.bindable(host) is None:
        return None
    world_size = int(os.environ["WORLD_SIZE"])
    if int(os.environ["RANK"]) == 0:
        try:  # as env:// does, the server waits for every rank to connect
            return stores.serve(host, port, timeout_s, world_size, wait_for_workers=True)
        except OSError as err:  # the port taken since the launcher chose it, or not our address
            raise SystemExit(f"workloads.train: cannot host the group's store on "
                             f"{host}:{port} ({err.strerror or err})") from None  # fmt: skip
    timeout = datetime.timedelta(seconds=timeout_s)
    return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)


def shutdown() -> None:
    """Leave the process group cleanly.

    A bare destroy_process_group() right after training crashed one gloo rank in up to half
    of the runs on our CI machines; collecting garbage (so no DDP reducer outlives the group),
    then a barrier, then destroy made every run exit cleanly. Callers drop their DDP model first.
    """
    if not dist.is_initialized():
        return
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    watchdog.disarm()


def redirect_output(log_file: Path) -> None:
    """Send this process's stdout and stderr, C-level writes included, to log_file."""
    fd = files.open_append(log_file)  # never through a planted logs/ or rank-N.log link
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # a stream put in its place keeps its own
            stream.reconfigure(line_buffering=True)
