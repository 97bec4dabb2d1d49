"""What the benches share: stackbench's own training path (workloads.training.run) in this
process, as rank 0 of 1 or as one rank of several, its event echo silenced, returning the
run's summary."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile

from contract.summary import TrainSummary
from workloads.configuration.train_config import TrainConfig
from workloads.runtime import dist as wdist
from workloads.training.launch import parse_args
from workloads.training.run import run


def single_rank_environment() -> None:
    """The torchrun variables of a world of one, on a free local port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def run_quietly(
    config: TrainConfig, *extra_args: str, env: wdist.DistEnv | None = None
) -> TrainSummary | None:
    """One run of `config` in this process as rank `env` (default: 0 of 1, after
    single_rank_environment()); rank 0 returns the summary, the others None."""
    env = env or wdist.DistEnv(0, 0, 1)
    with tempfile.TemporaryDirectory() as out:
        argv = ["--config", config.to_json(), "--run-id", "bench", "--output-dir", out]
        args = parse_args([*argv, *extra_args])
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            summary = run(config, env, args)
    assert (summary is not None) == (env.rank == 0)  # rank 0 returns it
    return summary


def steady(throughput: float | None) -> float:
    """A summary's throughput, or exit saying why there is none: a run records none without
    a steady step (workloads/telemetry/summary.py), so the bench's run was too short to time."""
    if throughput is None:
        raise SystemExit("the run recorded no throughput: it had no steady step; give it more")
    return throughput
