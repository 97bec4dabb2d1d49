"""The real entry point in processes of its own: `torchrun --standalone -m workloads.train`,
as a local run starts it, for tests that hold a run's files to what it trained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workloads.configuration.train_config import TrainConfig


def run_entry(
    config: TrainConfig,
    out: Path,
    *args: str,
    workers: int = 1,
    omp_threads: int | None = 1,
    timeout_s: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """The finished torchrun of `config` writing to `out`, with `args` for workloads.train
    (`--open-division`, `--benchmark NAME`); OMP_NUM_THREADS as given (None: inherited)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={workers}", "-m", "workloads.train", "--config", config.to_json(),
        "--run-id", "test", "--output-dir", str(out), *args,
    ]  # fmt: skip
    env = dict(os.environ)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)


def succeeded(done: subprocess.CompletedProcess[str]) -> None:
    """Assert the run exited 0, showing the end of its output when not."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
