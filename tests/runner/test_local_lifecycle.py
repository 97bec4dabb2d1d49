"""A local run's record under real faults to its processes: a SIGKILLed supervisor, SIGTERM or
SIGHUP to a foreground submit or a sweep, a SIGKILLed submit or sweep (the run goes with it, the
study reads partial), and a detached run going on after its submit returns. The supervisor's
verdict is in test_local_outcome.py, which processes are a run's in test_local_ownership.py,
commands killed around a run in test_local_commands.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from contract import files
from contract.events import read_events
from contract.rundir import EVENTS, JobState, read_state
from runner import api
from runner.backends.local import processes, supervisor
from runner.backends.local.backend import SUPERVISOR_FILE
from runner.results import report, rundir, study
from tests.conftest import submit_local
from tests.runner.local_runs import gone

LONG_RUN = ["stop_at_target=false", "max_epochs=400"]


def _started(run: api.Run, timeout_s: float = 90.0) -> list[psutil.Process]:
    """Every process of the run once rank 0 has started training."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        keys = [e["key"] for e in read_events(run.run_dir / EVENTS)]
        if "epoch_start" in keys:
            return processes.members(run.run_id, run.run_dir)
        time.sleep(0.1)
    raise AssertionError(f"{run.run_id} did not start training within {timeout_s} s")


@pytest.mark.slow
def test_a_sigkilled_supervisor_takes_every_worker_with_it_and_the_run_is_failed(tmp_path):
    run = submit_local(tmp_path, LONG_RUN)
    procs = _started(run)
    assert sorted(p.environ().get("RANK") for p in procs if "RANK" in p.environ()) == ["0", "1"]
    sup = files.read_json(run.run_dir / SUPERVISOR_FILE)
    os.kill(sup["pid"], signal.SIGKILL)
    gone(procs)  # the kernel ended torchrun and the workers (parent-death signals)
    status = api.status(tmp_path, run)
    assert status.state is JobState.FAILED
    assert "supervisor died" in status.reason
    assert read_state(run.run_dir) == status  # recorded, not only reported
    assert api.cancel(tmp_path, run).state is JobState.FAILED  # nothing left to stop


def _runner(results: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "--results-dir", str(results), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _only_run(results: Path, timeout_s: float = 60.0) -> api.Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dirs = rundir.list_dirs(results)
        if dirs:
            return api.open_run(results, dirs[0].name)
        time.sleep(0.1)
    raise AssertionError("no run directory appeared")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_or_sighup_to_a_foreground_submit_cancels_the_run(tmp_path, signum, code):
    proc = _runner(tmp_path, "submit", "cnn-digits", *(f"--set={s}" for s in LONG_RUN))
    run = _only_run(tmp_path)
    procs = _started(run)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == code, output
    assert "CANCELLED" in output
    gone(procs)
    assert read_state(run.run_dir).state is JobState.CANCELLED
    assert "run_start" in [e["key"] for e in read_events(run.run_dir / EVENTS)]  # kept


@pytest.mark.slow
def test_sigterm_to_a_sweep_cancels_its_run_and_the_study_lists_it(tmp_path):
    proc = _runner(tmp_path, "sweep", "cnn-digits", "--workers", "1,2", "--runs", "2",
                   *(f"--set={s}" for s in LONG_RUN))  # fmt: skip
    run = _only_run(tmp_path)
    procs = _started(run)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 143, output
    gone(procs)
    (study_file,) = (tmp_path / "studies").glob("*/study.json")
    study = json.loads(study_file.read_text())
    assert study["state"] == "partial"
    started = [r for r in study["runs"] if r["run_id"]]
    assert [(r["run_id"], r["state"]) for r in started] == [(run.run_id, "CANCELLED")]
    assert len(rundir.list_dirs(tmp_path)) == 1  # later runs never started


@pytest.mark.slow
def test_a_sigkilled_foreground_submit_takes_its_run_with_it(tmp_path):
    proc = _runner(tmp_path, "submit", "cnn-digits", *(f"--set={s}" for s in LONG_RUN))
    run = _only_run(tmp_path)
    procs = _started(run)
    proc.kill()  # no chance to cancel: the leash does it (runner/backends/local/leash.py)
    proc.wait()
    gone(procs)
    state = api.wait(tmp_path, run)
    assert state.state is JobState.CANCELLED
    assert state.reason == supervisor.LEASH_SNAPPED


@pytest.mark.slow
def test_a_sigkilled_sweep_takes_its_run_with_it_and_its_study_reads_partial(tmp_path):
    proc = _runner(tmp_path, "sweep", "cnn-digits", "--workers", "1", "--runs", "2",
                   *(f"--set={s}" for s in LONG_RUN))  # fmt: skip
    run = _only_run(tmp_path)
    procs = _started(run)
    (study_file,) = (tmp_path / "studies").glob("*/study.json")
    assert study.load(study_file).state == "running"  # its sweep lives
    proc.kill()
    proc.wait()
    gone(procs)
    assert api.wait(tmp_path, run).reason == supervisor.LEASH_SNAPPED
    assert json.loads(study_file.read_text())["state"] == "running"  # all it could write
    assert study.load(study_file).state == "partial"
    _, title, _ = report.collect(tmp_path, [study_file.parent.name])
    assert title.endswith("(partial)"), title


@pytest.mark.slow
def test_a_detached_run_goes_on_after_its_submit_returns(tmp_path):
    proc = _runner(tmp_path, "submit", "cnn-digits", "--workers", "1", "--detach",
                   *(f"--set={s}" for s in LONG_RUN))  # fmt: skip
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, output
    run = _only_run(tmp_path)
    try:
        assert _started(run)  # trains with no command following it
        assert api.status(tmp_path, run).state is JobState.RUNNING
    finally:
        assert api.cancel(tmp_path, run).state is JobState.CANCELLED
