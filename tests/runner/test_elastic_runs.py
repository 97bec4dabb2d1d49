"""Elastic runs through the runner (`--workers MIN:MAX`), end to end on local gloo workers:
a worker killed with SIGKILL mid-training leaves a run that goes on with the survivors and
ends SUCCEEDED with fewer workers, the change a decision event that says when; so does one
whose second worker is killed while the group re-forms; a kill that leaves fewer than MIN
fails the run with the workers' own reason; `runner join` brings the run back to MAX with a
worker that starts from the current state and ends with its peers' weights, and is refused
in one line at MAX, after the run, and for a run that is not elastic. The killed worker is
found by its process (its environment names the run and the worker), never by a pid in a
file."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from torch.distributed import PrefixStore, TCPStore

from contract.events import DECISION, read_events
from contract.rundir import EVENTS, STATE, SUMMARY, rank_log
from runner import api
from runner.backends.local import processes
from runner.backends.local.backend import LocalBackend
from runner.backends.local.launch import LAUNCH_FILE, digest, read_request
from runner.errors import RunnerError
from runner.job.spec import Placement, resolve
from tests.runner.members import worker_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Heartbeats every 0.2 s, a worker gone after 2 s still: the survivors go on 2 s after a kill.
ELASTIC = ["strategy=allreduce", "stop_at_target=false", "heartbeat_s=0.2", "dead_after_s=2"]


def _submit(results: Path, low: int | None, high: int, max_epochs: int, *extra: str) -> api.Run:
    overrides = [*ELASTIC, f"max_epochs={max_epochs}", *extra]
    spec = resolve("cnn-digits", overrides, Placement(procs_per_node=high, min_workers=low))
    return api.submit(spec, LocalBackend(results), results)


def _decisions(run: api.Run) -> list[dict]:
    return [e["value"] for e in read_events(run.run_dir / EVENTS) if e["key"] == DECISION]


def _until(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _digests(run: api.Run, rank: int) -> list[str]:
    """The `weights sha256` a worker printed when it ended (one line, or none)."""
    text = rank_log(run.run_dir, rank).read_text()
    return [ln.rsplit(" ", 1)[1] for ln in text.splitlines() if "weights sha256" in ln]


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
    os.kill(worker_process(run, member).pid, signal.SIGKILL)


def _epoch_event(run: api.Run, key: str, epoch: int) -> dict | None:
    """The writer's `key` event (epoch_start, epoch_stop) of `epoch`, once it is logged."""
    for event in read_events(run.run_dir / EVENTS):
        if event["key"] == key and event["metadata"].get("epoch_num") == epoch:
            return event
    return None


def _kill_inside_epoch(run: api.Run, member: str, epoch: int) -> None:
    """SIGKILL `member` about a third into `epoch` (the previous one's length, as its events
    time it, is what this machine takes for one now): never at an epoch's start or end,
    where the survivors may be a collective apart (one still in the evaluation or the
    epoch's reductions) and the run fails by design (docs/adaptive-elastic.md)."""
    _until(lambda: _epoch_event(run, "epoch_start", epoch), f"the run to begin epoch {epoch}")
    began, ended = (_epoch_event(run, key, epoch - 1) for key in ("epoch_start", "epoch_stop"))
    assert began is not None and ended is not None
    time.sleep((ended["time_ms"] - began["time_ms"]) / 1000 / 3)
    os.kill(worker_process(run, member).pid, signal.SIGKILL)


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


def _store(run: api.Run) -> PrefixStore:
    """A client of the store the run's supervisor hosts for its workers (launch.json's port),
    under the workers' prefix (workloads/adaptive/elastic/launch.py)."""
    request = read_request(run.run_dir, digest((run.run_dir / LAUNCH_FILE).read_bytes()))
    assert request.store_port is not None
    client = TCPStore("127.0.0.1", request.store_port, is_master=False,
                      timeout=datetime.timedelta(seconds=30))  # fmt: skip
    return PrefixStore("elastic/", client)


def test_a_worker_killed_while_the_group_re_forms_leaves_the_last_one_going_on(tmp_path):
    # w1 dies after it checked in to re-form without w2, before the new group forms: w0
    # must not wait for it in init_process_group (the collective timeout, 300 s) and fail.
    # w1 must die within dead_after_s of its check-in (before w0 counts w2 gone): 4 s to do it.
    run = _submit(tmp_path, 1, 3, 30, "dead_after_s=4", "dist_timeout_s=60")  # a hang: 1 min
    _kill_after_epoch(run, "w2", epoch=1)
    store = _store(run)
    _until(lambda: store.check(["gen/0/in/w1"]), "w1 to check in without w2")
    os.kill(worker_process(run, "w1").pid, signal.SIGKILL)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert "finished with 1 of 3 workers" in status.reason
    [change] = _decisions(run)  # both departures since the last group that formed
    assert (change["old"], change["new"], change["reason"]) == (3, 1, "w1, w2 left")
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    assert summary["world_size"] == 1 and summary["adaptive"]["final"]["workers"] == 1
    assert summary["final"]["epoch"] == 30  # evaluated to the end, by the last one
    # What it started with, not what one worker alone would be (`local`, one batch).
    config = run.record.spec.config
    assert summary["strategy"] == "allreduce"
    assert summary["global_batch_size"] == config.data.global_batch_size(3)  # type: ignore[union-attr]


def test_a_joiner_killed_while_it_waits_to_be_admitted_leaves_the_run_going_on(tmp_path):
    # Admitted at the next decision point (step 2000: time for w3 to start and register), by
    # then dead: the members must not wait for it until the collective timeout, and the
    # record holds the admission and the departure that undid it. A batch of 8: about 60
    # steps an epoch on 3 workers, so that w2's kill lands well inside epoch 2.
    admit = 2000
    # lr 0.01: at a batch of 8, the benchmark's 0.05 (x3 workers) may diverge.
    run = _submit(tmp_path, 1, 3, 40, "batch_size=8", "lr=0.01",
                  f"monitor_interval_steps={admit}", "dist_timeout_s=60")  # fmt: skip
    _kill_inside_epoch(run, "w2", epoch=2)
    _until(lambda: _decisions(run), "the survivors to re-form")
    api.join(tmp_path, run)
    store = _store(run)
    _until(lambda: store.add("joins", 0) == 4, "w3 to ask to join")
    os.kill(worker_process(run, "w3").pid, signal.SIGKILL)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert "finished with 2 of 3 workers" in status.reason
    keys = [(e["key"], e["metadata"].get("epoch_num")) for e in read_events(run.run_dir / EVENTS)]
    left = keys.index((DECISION, None))  # w2's departure: inside epoch 2, as meant
    assert keys.index(("epoch_start", 2)) < left < keys.index(("epoch_stop", 2))
    changes = [(d["old"], d["new"], d["reason"], d["step"]) for d in _decisions(run)]
    assert changes[0][:3] == (3, 2, "w2 left")
    assert changes[1:] == [(2, 3, "1 worker(s) waiting to join", admit), (3, 2, "w3 left", admit)]
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    assert summary["adaptive"]["decisions_by_knob"] == {"workers": 3}
    assert summary["world_size"] == 2 and summary["final"]["epoch"] == 40


def test_a_frozen_writer_after_its_peers_ended_the_run_fails_it_and_leaves_nothing(tmp_path):
    # w0 SIGSTOPped mid-training: w1 counts it gone (its collective times out, then its
    # heartbeat is still), says the run ended and exits. w0 never exits by itself; the run
    # must not say RUNNING for ever.
    run = _submit(tmp_path, 1, 2, 200, "dist_timeout_s=5")
    _until(
        lambda: any(e["key"] == "epoch_stop" for e in read_events(run.run_dir / EVENTS)),
        "training to be under way",
    )
    writer = worker_process(run, "w0")
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        status = api.wait(tmp_path, run)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer.pid, signal.SIGCONT)
    assert status.state.value == "FAILED", status
    assert "\n" not in status.reason
    assert status.reason.startswith("worker w0, which writes the run's record, left"), status
    assert "worker 0 (the writer) was still running but unresponsive" in status.reason
    assert "worker 1 exited with code 4" in status.reason
    assert not (run.run_dir / SUMMARY).exists()
    _, alive = psutil.wait_procs(processes.members(run.run_dir.name, run.run_dir), timeout=30)
    assert alive == [] and not writer.is_running()


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


def test_a_joining_worker_brings_the_run_back_to_max_and_ends_with_its_peers_weights(tmp_path):
    # Long enough for the joiner to start (importing torch takes seconds on a busy machine).
    run = _submit(tmp_path, low=2, high=3, max_epochs=30)
    _until(lambda: api.status(tmp_path, run).state.value == "RUNNING", "the run to start")
    with pytest.raises(RunnerError, match=r"already has 3 workers, its maximum \(--workers 2:3\)"):
        api.join(tmp_path, run)
    _kill_after_epoch(run, "w2", epoch=1)
    _until(lambda: _decisions(run), "the survivors to re-form")
    started = api.join(tmp_path, run)
    assert started.startswith("worker w3 started") and "logs/rank-3.log" in started
    with pytest.raises(RunnerError, match="already has 3 workers"):  # w0, w1 and w3
        api.join(tmp_path, run)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert "finished with 3 of 3 workers (worker 2 exited with code -9" in status.reason
    left, joined = _decisions(run)
    assert (left["old"], left["new"], left["reason"]) == (3, 2, "w2 left")
    assert (joined["knob"], joined["old"], joined["new"]) == ("workers", 2, 3)
    assert joined["reason"] == "1 worker(s) waiting to join"
    assert joined["step"] > left["step"]
    summary = json.loads((run.run_dir / SUMMARY).read_text())
    assert summary["world_size"] == 3
    assert summary["adaptive"]["final"]["workers"] == 3
    assert summary["adaptive"]["decisions_by_knob"] == {"workers": 2}
    joiner_log = rank_log(run.run_dir, 3).read_text()
    assert f"w3 admitted as rank 2 of 3 at step {joined['step']}" in joiner_log
    # Every worker that finished holds the same weights, the joiner's included.
    [writer] = _digests(run, 0)
    assert _digests(run, 1) == _digests(run, 3) == [writer]
    assert _digests(run, 2) == []  # killed: it never ended
    with pytest.raises(RunnerError, match=r"is SUCCEEDED, not running"):
        api.join(tmp_path, run)


def test_joining_a_run_that_is_not_elastic_is_refused_in_one_line(tmp_path):
    run = _submit(tmp_path, low=None, high=1, max_epochs=1)
    try:
        with pytest.raises(RunnerError, match=r"is not elastic; only a run submitted with "):
            api.join(tmp_path, run)
    finally:
        api.cancel(tmp_path, run)
