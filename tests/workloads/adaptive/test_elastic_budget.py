"""An elastic run's time budget (`--workers MIN:MAX --set time_budget_s=S`), end to end on
local gloo workers through the runner: the writer's clock decides at the run's check steps
(every BUDGET_CHECK_EVERY_STEPS steps of the run), every worker takes that step and stops
after it, so every worker ends at the same step with the same weights, the run SUCCEEDED
and its summary says the budget stopped it; the same with a worker killed (SIGKILL) and a
worker joining during the run. The killed worker is found by its process, never by a pid
in a file."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from contract.events import DECISION, RUN_STOP, read_events
from contract.rundir import EVENTS, SUMMARY, rank_log
from runner import api
from runner.backends.local.backend import LocalBackend
from runner.job.spec import Placement, resolve
from tests.runner.members import worker_process
from workloads.training.loop import BUDGET_CHECK_EVERY_STEPS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Heartbeats every 0.2 s, a worker gone after 2 s still; no target stop, epochs without end:
# only the budget can end these runs.
ELASTIC = ["strategy=allreduce", "stop_at_target=false", "heartbeat_s=0.2", "dead_after_s=2",
           "max_epochs=100000"]  # fmt: skip
ENDED = re.compile(r"elastic: (w\d+) ended at step (\d+) with (\d+) workers; weights sha256 (\w+)")


def _submit(results: Path, low: int, high: int, budget_s: float, *extra: str) -> api.Run:
    overrides = [*ELASTIC, f"time_budget_s={budget_s}", *extra]
    spec = resolve("cnn-digits", overrides, Placement(procs_per_node=high, min_workers=low))
    return api.submit(spec, LocalBackend(results), results)


def _until(condition: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _events(run: api.Run) -> list[dict[str, Any]]:
    return read_events(run.run_dir / EVENTS)


def _ends(run: api.Run, ranks: range) -> dict[str, tuple[int, int, str]]:
    """Each worker's last line: (step it ended at, workers, weights digest) by member."""
    ends = {}
    for rank in ranks:
        for match in ENDED.finditer(rank_log(run.run_dir, rank).read_text(errors="replace")):
            ends[match[1]] = (int(match[2]), int(match[3]), match[4])
    return ends


def _assert_stopped_by_the_budget(run: api.Run, ends: dict[str, tuple[int, int, str]]) -> None:
    """The summary says the budget stopped it, and success only with the target reached;
    the run's last event agrees; every worker that ended stopped after the same check step,
    with the same weights."""
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    assert summary["stopped_by_time_budget"] is True
    assert summary["epochs"] < 100000 and summary["diverged"] is None
    assert summary["status"] == ("success" if summary["target_reached"] else "aborted")
    [stop] = [e for e in _events(run) if e["key"] == RUN_STOP]
    assert stop["metadata"]["status"] == summary["status"]
    [(step, workers, _)] = set(ends.values())  # one step, world and digest for all
    assert step % BUDGET_CHECK_EVERY_STEPS == 1  # the step after a check, taken by all
    assert workers == summary["world_size"] == len(ends)


def test_an_elastic_run_stops_at_its_time_budget_on_every_worker_saying_so(tmp_path):
    run = _submit(tmp_path, low=1, high=3, budget_s=2)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert status.reason == ""
    ends = _ends(run, range(3))
    assert set(ends) == {"w0", "w1", "w2"}
    _assert_stopped_by_the_budget(run, ends)


def _decisions(run: api.Run) -> list[dict[str, Any]]:
    return [e["value"] for e in _events(run) if e["key"] == DECISION]


def _epoch_started(run: api.Run, epoch: int) -> bool:
    return any(
        e["key"] == "epoch_start" and e["metadata"].get("epoch_num") == epoch for e in _events(run)
    )


def test_a_worker_leaving_and_one_joining_still_stop_every_worker_at_the_budget(tmp_path):
    # Long enough for the survivors to re-form (2 s) and for the joiner to start (importing
    # torch takes seconds on a busy machine) and be admitted before the budget is spent. A
    # batch of 8: about 60 steps an epoch, so that a joiner, which enters mid-epoch, counts
    # the epoch's steps apart from its peers between two budget checks (lr 0.01: at a batch
    # of 8 the benchmark's 0.05 x 3 workers may diverge).
    run = _submit(
        tmp_path,
        2,
        3,
        30,
        "batch_size=8",
        "lr=0.01",
        "dist_timeout_s=60",
        "monitor_interval_steps=7",
    )  # admitted at a step a multiple of 7
    _until(lambda: _epoch_started(run, 3), "the run to train")
    time.sleep(0.05)  # inside epoch 3, not at its start (docs/adaptive-elastic.md)
    os.kill(worker_process(run, "w2").pid, signal.SIGKILL)
    _until(lambda: _decisions(run), "the survivors to re-form")
    api.join(tmp_path, run)
    _until(lambda: len(_decisions(run)) >= 2, "w3 to be admitted")
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert "finished with 3 of 3 workers (worker 2 exited with code -9" in status.reason
    left, joined = _decisions(run)
    assert (left["old"], left["new"], left["reason"]) == (3, 2, "w2 left")
    assert (joined["old"], joined["new"]) == (2, 3)
    ends = _ends(run, range(4))
    assert set(ends) == {"w0", "w1", "w3"}  # w2 was killed: it never ended
    # The joiner entered mid-epoch with its own count of the epoch's steps: it still stopped
    # after the same step as the others.
    _assert_stopped_by_the_budget(run, ends)
