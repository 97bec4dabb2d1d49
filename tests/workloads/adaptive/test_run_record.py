"""What an adaptive run's summary states against what it trained, from real runs of the entry
point: an elastic run whose worker is SIGKILLed in the middle of an epoch counts the samples
that worker trained before it left and states the global batch its survivors trained at, and
a batch policy whose max_global_batch is below the configured global batch states the batch
its steps trained at. The truth each is held to is
the run's own per-step record: with monitor_interval_steps=1 every step's monitors event
says the global batch it trained at and the samples it took over all workers."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from contract.events import DECISION, GLOBAL_BATCH_SIZE, MONITORS, OPT_BASE_LR, read_events
from contract.rundir import EVENTS, SUMMARY
from runner import api
from runner.backends.local.backend import LocalBackend
from runner.job.benchmarks import BENCHMARKS
from runner.job.spec import Placement, resolve
from tests.runner.members import worker_process
from tests.workloads.entry import run_entry, succeeded

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
EVERY_STEP = ["monitor=true", "monitor_interval_steps=1"]  # one monitors event a step
DIGITS_TRAIN = 1438  # digits' training split (workloads/data/digits.py)


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["value"] for e in events if e["key"] == MONITORS]


def _steps_into_epoch(run: api.Run, epoch: int) -> int:
    events = read_events(run.run_dir / EVENTS)
    starts = [i for i, e in enumerate(events)
              if e["key"] == "epoch_start" and e["metadata"].get("epoch_num") == epoch]  # fmt: skip
    return len(_steps(events[starts[0] :])) if starts else 0


@pytest.fixture(scope="module")
def elastic_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A `--workers 2:3` run under a batch policy held at 15 (5 a worker), whose w2 is
    SIGKILLed 5 steps into epoch 2: the survivors train the rest at 14, the largest multiple
    of 2 workers. At lr 0.01: at the default LR, batches of 5 a worker diverge for some seeds
    (and for seed 0 after any change to the order gloo sums in)."""
    results = tmp_path_factory.mktemp("elastic")
    overrides = ["strategy=allreduce", "stop_at_target=false", "heartbeat_s=0.2",
                 "dead_after_s=2", "max_epochs=3", "policy=batch", "batch_size=5",
                 "max_global_batch=15", "lr=0.01", *EVERY_STEP]  # fmt: skip
    spec = resolve("cnn-digits", overrides, Placement(procs_per_node=3, min_workers=2))
    run = api.submit(spec, LocalBackend(results), results)
    deadline = time.monotonic() + 120
    while _steps_into_epoch(run, 2) < 5:
        assert time.monotonic() < deadline, "the run did not reach its second epoch"
        time.sleep(0.01)
    os.kill(worker_process(run, "w2").pid, signal.SIGKILL)
    status = api.wait(results, run)
    assert status.state.value == "SUCCEEDED", status
    events = read_events(run.run_dir / EVENTS)
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    return {"events": events, "summary": summary}


def test_an_elastic_run_counts_the_samples_of_a_worker_that_left_mid_epoch(elastic_run):
    events = elastic_run["events"]
    [left] = [
        e["value"] for e in events if e["key"] == DECISION and e["value"]["knob"] == "workers"
    ]
    assert (left["old"], left["new"]) == (3, 2)
    per_epoch = -(-(DIGITS_TRAIN - 1) // 15)  # steps of an epoch at 15 on 3 workers
    assert per_epoch < left["step"] < 2 * per_epoch  # in epoch 2: w2 trained part of it
    trained = sum(step["samples"] for step in _steps(events))
    # w2's steps of epoch 2 are in the count (they were left out: the sum fell short).
    assert elastic_run["summary"]["train_samples"] == trained
    # Each epoch trains all but fewer than W of its samples, whoever took them.
    assert 3 * (DIGITS_TRAIN - 2) <= trained <= 3 * DIGITS_TRAIN


def test_an_elastic_run_states_the_global_batch_its_last_steps_trained_at(elastic_run):
    last = _steps(elastic_run["events"])[-2]  # the last step of an epoch may take fewer
    assert last["global_batch"] == last["samples"] == 14
    summary = elastic_run["summary"]
    assert summary["adaptive"]["final"]["global_batch"] == 14  # said 15: the policy's knob
    assert summary["global_batch_size"] == 15  # the start's (docs/adaptive-elastic.md)


def test_a_batch_policy_capped_below_the_configured_batch_states_the_batch_it_trained(tmp_path):
    # cnn-digits is configured for 32 a worker; max_global_batch=8 caps it from the first step.
    config = BENCHMARKS["cnn-digits"].config.with_overrides(
        {"policy": "batch", "max_global_batch": "8", "max_epochs": "1",
         "stop_at_target": "false", "monitor_interval_steps": "1"}
    )  # fmt: skip
    out = tmp_path / "out"
    succeeded(run_entry(config, out, "--open-division"))
    events = read_events(out / EVENTS)
    steps = _steps(events)
    assert {step["global_batch"] for step in steps} == {8}  # what it trained at
    summary = json.loads(Path(out / SUMMARY).read_text())
    assert summary["global_batch_size"] == 8  # said 32: the configured, unbounded batch
    assert summary["steps"] == len(steps) == -(-DIGITS_TRAIN // 8)
    # The MLPerf log's keys say the same, and its base LR is what the steps peaked at (the
    # linear rule's 8/32 of the configured peak; it said the configured peak, 4x too high).
    logged = {e["key"]: e["value"] for e in events}
    assert logged[GLOBAL_BATCH_SIZE] == 8
    peak = max(step["lr"] for step in steps)
    assert logged[OPT_BASE_LR] == pytest.approx(peak)
    assert peak == pytest.approx(BENCHMARKS["cnn-digits"].config.lr_plan(1).peak_lr * 8 / 32)
    # And so does the plan that `runner submit` and its dry run print.
    plan = config.lr_plan(1)
    assert plan.peak_lr == pytest.approx(peak)
    assert "the batch policy starts at 8 of 32" in str(plan)
