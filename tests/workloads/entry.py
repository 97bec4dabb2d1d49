"""The real entry point in processes of its own: `torchrun --standalone -m workloads.train`,
as a local run starts it, for tests that hold a run's files to what it trained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workloads.configuration.train_config import TrainConfig


def torchrun(out: Path, workers: int) -> list[str]:
    """torchrun's own command line for a run writing to `out`, up to the module it runs.

    torchrun makes a folder per rank for their logs and error files even when it redirects
    nothing, by default a torchelastic_* folder of the machine's temp dir that nothing ever
    removes (torch's DefaultLogsSpecs mkdtemp); told --log-dir, it makes them there: beside
    `out`, in the test's own temporary folder."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={workers}", f"--log-dir={out.parent / (out.name + '.torchrun')}",
    ]  # fmt: skip


def run_entry(
    config: TrainConfig,
    out: Path,
    *args: str,
    workers: int = 1,
    omp_threads: int | None = 1,
    timeout_s: float = 240.0,
) -> subprocess.CompletedProcess[str]:
    """The finished torchrun of `config` writing to `out`, with `args` for workloads.train
    (`--open-division`, `--benchmark NAME`); OMP_NUM_THREADS as given (None: inherited).
    `timeout_s` bounds a hang, under pytest's 300 s: the tiny Transformer's 48 s on CI's 2
    cores took over 120 s with other work on them.

    The run's temp dir (TMPDIR) is a fresh folder of its own, which must be empty when it has
    ended, however it ended: whatever the launcher or a worker puts there outlives the run."""
    cmd = [
        *torchrun(out, workers), "-m", "workloads.train", "--config", config.to_json(),
        "--run-id", "test", "--output-dir", str(out), *args,
    ]  # fmt: skip
    temp = out.parent / (out.name + ".tmp")
    temp.mkdir(parents=True, exist_ok=True)
    # Importing torch._dynamo makes inductor's default cache folder in the temp dir
    # (torchinductor_<user>, torch's per-user cache, not the run's) unless
    # TORCHINDUCTOR_CACHE_DIR names one: pytest's own process sets it once any test imported
    # torch._dynamo, so it is named here, for every order of the tests alike. A compiled run
    # puts its own (the private cache) in its place (workloads/runtime/compiling.py).
    env = {**os.environ, "TMPDIR": str(temp),
           "TORCHINDUCTOR_CACHE_DIR": str(out.parent / (out.name + ".inductor"))}  # fmt: skip
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    left = sorted(str(path.relative_to(temp)) for path in temp.rglob("*"))
    assert not left, f"the run left {left} in its temp dir"
    return done


def succeeded(done: subprocess.CompletedProcess[str]) -> None:
    """Assert the run exited 0, showing the end of its output when not."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
