"""A local run and the commands around it, run as real processes and killed: a run ends cancelled
when the command following it is SIGKILLed, and goes on when released; a run being started
stays pending to others until its starter is killed; runs listed while they start are neither
failed nor killed; a stopped process ends by its SIGTERM; and a run whose directory is deleted
ends taking its processes with it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from contract import files
from contract.rundir import JobState, JobStatus, read_state
from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local import processes, supervisor
from runner.backends.local.backend import SUPERVISOR_FILE, LocalBackend
from runner.job.spec import resolve
from runner.results import rundir
from tests.runner.local_runs import gone, sleeping_run

# Submits a run whose one process sleeps, says so, then waits to be killed; `release` lets the
# run go on alone first, as `runner submit --detach` does.
SUBMIT_AND_WAIT = """
import sys, time
from pathlib import Path
from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local import leash
from runner.backends.local.backend import LocalBackend
from runner.job.spec import resolve
from runner.results import rundir
results, release = Path(sys.argv[1]), sys.argv[2] == "release"
spec = resolve("cnn-digits", run_id="cnn-digits-leashed")
run_dir = rundir.create(results, rundir.RunRecord(spec, "local", "local://cnn-digits-leashed"))
LocalBackend(results).submit(LocalRequest(str(run_dir), (Process(("sleep", "60")),)))
if release:
    leash.release(run_dir)
while api.status(results, api.open_run(results, spec.run_id)).state.value != "RUNNING":
    time.sleep(0.05)
print("running", flush=True)
time.sleep(60)
"""


def _submitted_then_killed(results: Path, how: str) -> tuple[api.Run, psutil.Process]:
    """The run SUBMIT_AND_WAIT started, and its sleeping process, once its submitter is
    SIGKILLed."""
    starter = subprocess.Popen(
        [sys.executable, "-c", SUBMIT_AND_WAIT, str(results), how],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert starter.stdout is not None and starter.stdout.readline() == "running\n"
        run = api.open_run(results, "cnn-digits-leashed")
        (sleeper,) = [p for p in processes.members(run.run_id, run.run_dir) if p.name() == "sleep"]
    finally:
        starter.kill()
        starter.wait()
    return run, sleeper


def test_a_run_ends_cancelled_when_the_command_that_follows_it_is_sigkilled(tmp_path):
    run, sleeper = _submitted_then_killed(tmp_path, "keep")
    status = api.wait(tmp_path, run)
    assert status.state is JobState.CANCELLED
    assert status.reason == supervisor.LEASH_SNAPPED
    gone([sleeper])


def test_a_released_run_goes_on_when_the_command_that_started_it_ends(tmp_path):
    run, sleeper = _submitted_then_killed(tmp_path, "release")
    try:
        time.sleep(20 * supervisor.POLL_S)  # a snapped leash is seen within one poll
        assert sleeper.is_running()
        assert api.status(tmp_path, run).state is JobState.RUNNING
    finally:
        assert api.cancel(tmp_path, run).state is JobState.CANCELLED


HOLD_START_LOCK = """
import sys, time
from pathlib import Path
from runner import flock
with flock.hold(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_run_being_started_stays_pending_to_others_until_its_starter_is_killed(tmp_path):
    spec = resolve("cnn-digits", run_id="cnn-digits-starting")
    run_dir = rundir.create(
        tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-starting")
    )
    rundir.write_state(run_dir, JobStatus(JobState.PENDING, "submitting"))
    starter = subprocess.Popen(
        [sys.executable, "-c", HOLD_START_LOCK, str(run_dir / "logs" / "supervisor.log")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert starter.stdout is not None and starter.stdout.readline() == "locked\n"
        backend = LocalBackend(tmp_path)
        assert backend.status("local://cnn-digits-starting").state is JobState.PENDING
        assert read_state(run_dir).state is JobState.PENDING  # nothing recorded over it
    finally:
        starter.kill()  # as a SIGKILLed `runner submit` before the supervisor started
        starter.wait()
    status = LocalBackend(tmp_path).status("local://cnn-digits-starting")
    assert status.state is JobState.FAILED
    assert "stopped before the run started" in status.reason


LIST_RUNS_FOREVER = """
import sys
from pathlib import Path
from runner import api
print("listing", flush=True)
while True:
    api.list_runs(Path(sys.argv[1]))
"""


def test_runs_listed_while_they_start_are_neither_failed_nor_killed(tmp_path):
    lister = subprocess.Popen(
        [sys.executable, "-c", LIST_RUNS_FOREVER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert lister.stdout is not None and lister.stdout.readline() == "listing\n"
        runs = []
        for i in range(4):
            spec = resolve("cnn-digits", run_id=f"cnn-digits-listed-{i}")
            run_dir = rundir.create(
                tmp_path, rundir.RunRecord(spec, "local", f"local://{spec.run_id}")
            )
            rundir.write_state(run_dir, JobStatus(JobState.PENDING, "submitting"))
            writes_summary = Process(("sh", "-c", "echo '{}' > summary.json"), cwd=str(run_dir))
            LocalBackend(tmp_path).submit(LocalRequest(str(run_dir), (writes_summary,)))
            runs.append(api.open_run(tmp_path, spec.run_id))
        states = [api.wait(tmp_path, run) for run in runs]
        assert [s.state for s in states] == [JobState.SUCCEEDED] * 4, states
    finally:
        lister.kill()
        lister.wait()


def test_a_stopped_process_is_ended_by_its_sigterm_not_left_for_the_sigkill(tmp_path):
    """A rank stopped with SIGSTOP (a debugger, Ctrl-Z) never acts on SIGTERM until it is
    continued: ending the run waited out the grace and killed it, its handler unrun."""
    handled = tmp_path / "sigterm-handled"
    code = (
        "import pathlib, signal, sys, time\n"
        "def done(*_):\n"
        f"    pathlib.Path({str(handled)!r}).touch(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, done)\n"
        f"pathlib.Path({str(tmp_path / 'ready')!r}).touch()\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        while not (tmp_path / "ready").exists():
            assert child.poll() is None
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGSTOP)
        processes.end([psutil.Process(child.pid)], grace_s=20)  # reaps it (psutil waits)
        assert handled.exists(), "the stopped process was SIGKILLed, its SIGTERM never handled"
    finally:
        child.kill()
        child.wait()


def test_a_run_whose_directory_is_deleted_ends_taking_its_processes_with_it(tmp_path):
    """`rm -r` of a live run's directory: nothing could follow or cancel the run any more
    (`runner cancel` finds no run), so its processes trained on, owned by nobody."""
    run = sleeping_run(tmp_path, "cnn-digits-deleted")
    sup = psutil.Process(files.read_json(run.run_dir / SUPERVISOR_FILE)["pid"])
    deadline = time.monotonic() + 30
    while not (sleeping := [p for p in sup.children() if p.name() == "sleep"]):
        assert time.monotonic() < deadline, "the run's process never started"
        time.sleep(0.05)
    # The supervisor records RUNNING after it has started the process: a moment later.
    while api.status(tmp_path, run).state is not JobState.RUNNING:
        assert time.monotonic() < deadline, "the run never said RUNNING"
        time.sleep(0.05)
    shutil.rmtree(run.run_dir)
    gone([*sleeping, sup])
    assert not run.run_dir.exists()  # not made again to hold a state.json alone
