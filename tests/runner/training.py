"""Waiting for a real local run to start training, and failing at once with the run's own
reason when it ended first (a refused probe, a failed rank) instead of waiting out the clock."""

from __future__ import annotations

import time

from contract.events import read_events
from contract.rundir import EVENTS, read_state
from runner import api


def wait_for_training(run: api.Run, timeout_s: float = 120.0) -> None:
    """Return once the run's rank 0 has logged its first `epoch_start`."""
    deadline = time.monotonic() + timeout_s
    while "epoch_start" not in [e["key"] for e in read_events(run.run_dir / EVENTS)]:
        state = read_state(run.run_dir)
        if state is not None and state.state.finished:
            raise AssertionError(f"{run.run_id} ended {state.state.value}: {state.reason}")
        assert time.monotonic() < deadline, f"{run.run_id} never started training"
        time.sleep(0.1)
