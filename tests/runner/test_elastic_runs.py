"""Elastic runs through the runner (`--workers MIN:MAX`), end to end on local gloo workers:
a worker killed with SIGKILL mid-training leaves a run that goes on with the survivors and
ends SUCCEEDED with fewer workers, the change a decision event that says when; a kill that
leaves fewer than MIN fails the run with the workers' own reason. The killed worker is found
by its process (its environment names the run and the worker), never by a pid in a file."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from contract.events import DECISION, read_events
from contract.rundir import EVENTS, STATE, SUMMARY
from runner import api
from runner.backends.local import processes
from runner.backends.local.backend import LocalBackend
from runner.job.spec import Placement, resolve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Heartbeats every 0.2 s, a worker gone after 2 s still: the survivors go on 2 s after a kill.
ELASTIC = ["strategy=allreduce", "stop_at_target=false", "heartbeat_s=0.2", "dead_after_s=2"]


def _submit(results: Path, low: int, high: int, max_epochs: int) -> api.Run:
    overrides = [*ELASTIC, f"max_epochs={max_epochs}"]
    spec = resolve("cnn-digits", overrides, Placement(procs_per_node=high, min_workers=low))
    return api.submit(spec, LocalBackend(results), results)


def _worker(run: api.Run, member: str) -> psutil.Process:
    """The live process of worker `member` of the run, as its own environment says."""
    for proc in processes.members(run.run_dir.name, run.run_dir):
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("STACKBENCH_MEMBER") == member and "workloads.train" in proc.cmdline():
            return proc
    raise AssertionError(f"no live process of worker {member}")


def _kill_after_epoch(run: api.Run, member: str, epoch: int) -> None:
    """SIGKILL `member` once the run has finished `epoch` (training is under way)."""
    deadline = time.monotonic() + 120
    while not any(
        e["key"] == "epoch_stop" and e["metadata"].get("epoch_num") == epoch
        for e in read_events(run.run_dir / EVENTS)
    ):
        assert time.monotonic() < deadline, "the run did not reach its first epoch's end"
        assert json.loads((run.run_dir / STATE).read_text())["state"] != "FAILED"
        time.sleep(0.05)
    os.kill(_worker(run, member).pid, signal.SIGKILL)


def test_killing_a_worker_leaves_the_run_succeeded_with_fewer_workers(tmp_path):
    run = _submit(tmp_path, low=2, high=3, max_epochs=5)
    _kill_after_epoch(run, "w2", epoch=1)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert "finished with 2 of 3 workers" in status.reason
    assert "worker 2 exited with code -9 (killed by SIGKILL)" in status.reason
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    assert summary["world_size"] == 2
    assert summary["adaptive"]["final"]["workers"] == 2
    assert summary["adaptive"]["decisions_by_knob"] == {"workers": 1}
    [change] = [e["value"] for e in read_events(run.run_dir / EVENTS) if e["key"] == DECISION]
    assert (change["knob"], change["old"], change["new"]) == ("workers", 3, 2)
    assert change["reason"] == "w2 left"
    assert change["step"] > 0 and change["time_s"] > 0  # when: after some training


def test_a_kill_that_leaves_fewer_than_min_workers_fails_the_run_with_the_reason(tmp_path):
    run = _submit(tmp_path, low=2, high=2, max_epochs=20)
    _kill_after_epoch(run, "w1", epoch=1)
    status = api.wait(tmp_path, run)
    assert status.state.value == "FAILED"
    assert "1 worker(s) left after w1 left; the run needs at least 2" in status.reason
    assert not (run.run_dir / SUMMARY).exists()
    # Nothing outlives the run (the supervisor itself exits just after recording it).
    _, alive = psutil.wait_procs(processes.members(run.run_dir.name, run.run_dir), timeout=30)
    assert alive == []
