"""The elastic arm's driver for bench/adaptive_study.py: in a run on --workers 1:2, worker w1
is killed (SIGKILL, a real fault) early in epoch 1, and `runner join` brings the run back to
2 workers once the survivor recorded the departure.

The kill lands KILL_AFTER_S after epoch 1 began (never at an epoch's edge, where
docs/adaptive-elastic.md says the run fails by design; epoch 1 lasts several seconds at the
study's settings). Early, so that the joiner (a new process importing torch, admitted 11-20 s
after the departure on a loaded 2-core machine) comes before the run meets its target:
killed a third into epoch 2, as this driver did before, most runs met the target first and
the arm measured a departure only. The study reads whether both happened from the run's
decision events (adaptive_arms.py), not from this driver.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from contract.events import DECISION, EPOCH_START, read_events
from contract.rundir import EVENTS
from runner import api
from runner.backends.local import processes
from runner.errors import RunnerError

LEAVER = "w1"
KILL_AFTER_S = 1.0
WAIT_S = 300.0  # for a step of the run to show in its events; a loaded machine is slow


def leave_and_join(results: Path, run: api.Run) -> str | None:
    """Kills LEAVER KILL_AFTER_S into epoch 1, then asks for a worker once it is recorded
    gone. None when done, else what stopped it, in a line (the run ended first, say)."""
    if not _until(results, run, lambda: _event(run, EPOCH_START), "epoch 1"):
        return "the run ended before epoch 1"
    time.sleep(KILL_AFTER_S)
    leaver = _member(run, LEAVER)
    if leaver is None:
        return f"no live process of worker {LEAVER}"
    os.kill(leaver.pid, signal.SIGKILL)
    if not _until(results, run, lambda: _departed(run), "the departure to be recorded"):
        return "the run ended before the departure was recorded"
    try:
        api.join(results, run)
    except RunnerError as err:  # the run met its target and ended meanwhile, say
        return f"runner join: {err}"
    return None


def _until(results: Path, run: api.Run, condition: Callable[[], Any], what: str) -> bool:
    """True once `condition` holds; False when the run ended first."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return True
        if api.status(results, run).state.finished:
            return bool(condition())
        time.sleep(0.05)
    raise SystemExit(f"{run.run_id}: timed out after {WAIT_S:g} s waiting for {what}")


def _event(run: api.Run, key: str) -> dict[str, Any] | None:
    return next((e for e in read_events(run.run_dir / EVENTS) if e["key"] == key), None)


def _departed(run: api.Run) -> bool:
    return any(
        e["key"] == DECISION and e["value"].get("knob") == "workers"
        for e in read_events(run.run_dir / EVENTS)
        if isinstance(e.get("value"), dict)
    )


def _member(run: api.Run, member: str) -> psutil.Process | None:
    for proc in processes.members(run.run_dir.name, run.run_dir):
        try:
            if proc.environ().get("STACKBENCH_MEMBER") == member and "workloads.train" in (
                proc.cmdline()
            ):
                return proc
        except psutil.Error:
            continue
    return None
