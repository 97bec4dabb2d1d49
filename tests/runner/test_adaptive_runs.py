"""Adaptive runs through the runner, end to end on 2 local gloo workers: the record says open
division, the events hold every monitor snapshot and decision, the summary counts them, and
a run that diverges under its policies is FAILED with the reason."""

from __future__ import annotations

import json

import pytest

from contract.events import DECISION, MONITORS, SUBMISSION_DIVISION, TRAIN_LOSS, read_events
from contract.rundir import EVENTS, SUMMARY
from runner import api
from tests.conftest import submit_local

pytestmark = pytest.mark.slow
# B0 = 8 on 2 workers: the noise scale of digits (20-50 early on) exceeds it within an epoch.
# The one-epoch ramp these were written with (cnn-digits ramps over 5 since issue 33).
GROWING = ["policy=batch", "batch_size=4", "lr=0.01", "strategy=allreduce", "max_epochs=3",
           "stop_at_target=false", "monitor_interval_steps=5", "warmup_epochs=1"]  # fmt: skip


def test_an_adaptive_batch_run_succeeds_in_the_open_division_with_its_decisions_recorded(
    tmp_path,
):
    run = submit_local(tmp_path, GROWING)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert run.record.spec.division == "open" and run.record.spec.open_keys == (
        "monitor_interval_steps", "policy",
    )  # fmt: skip
    events = read_events(run.run_dir / EVENTS)
    division = next(e["value"] for e in events if e["key"] == SUBMISSION_DIVISION)
    assert division == "open"
    snapshots = [e["value"] for e in events if e["key"] == MONITORS]
    decisions = [e["value"] for e in events if e["key"] == DECISION]
    assert snapshots and all(s["step"] % 5 == 0 for s in snapshots)
    grown = [d for d in decisions if d["knob"] == "global_batch"]
    assert grown and all(d["new"] > d["old"] for d in grown)
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    adaptive = summary["adaptive"]
    assert adaptive["policies"] == ["batch"] and adaptive["decisions"] == len(decisions)
    assert adaptive["final"]["global_batch"] == grown[-1]["new"]


def test_a_run_that_diverges_under_its_policies_is_failed_with_the_reason(tmp_path):
    # The linear LR rule multiplies an LR already far too large as the batch grows.
    run = submit_local(tmp_path, [*GROWING, "lr=5", "max_epochs=6"])
    status = api.wait(tmp_path, run)
    assert status.state.value == "FAILED"
    assert "diverged at epoch" in status.reason


def test_watching_a_run_changes_none_of_its_numbers(tmp_path):
    # Monitors on, no policy: the run goes through the adaptive loop, which must train with
    # the fixed loop's batches and LRs. digits' 1,437 training samples leave a short last
    # batch, where an LR schedule counting steps and one counting samples part ways.
    plain = ["max_epochs=2", "stop_at_target=false"]
    losses = []
    for extra in ([], ["monitor=true"]):
        run = submit_local(tmp_path, [*plain, *extra])
        assert api.wait(tmp_path, run).state.value == "SUCCEEDED"
        events = read_events(run.run_dir / EVENTS)
        losses.append([e["value"] for e in events if e["key"] == TRAIN_LOSS])
    assert len(losses[0]) == 2 and losses[0] == losses[1]
