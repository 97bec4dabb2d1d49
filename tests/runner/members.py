"""A local elastic run's workers as live processes, found by what they are, not by a pid in a
file: tests kill them with real signals."""

from __future__ import annotations

import psutil

from runner import api
from runner.backends.local import processes


def worker_process(run: api.Run, member: str) -> psutil.Process:
    """The live process of worker `member` ("w2") of the run, as its own environment says."""
    for proc in processes.members(run.run_dir.name, run.run_dir):
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("STACKBENCH_MEMBER") == member and "workloads.train" in proc.cmdline():
            return proc
    raise AssertionError(f"no live process of worker {member}")
