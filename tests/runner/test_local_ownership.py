"""Which processes are a local run's: only those whose environment names it (never one a forged
supervisor.json names, and one that left the run's environment still ends with it), a copied
run directory never reaches the original run, and a handle names its run exactly, never by a
prefix."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time

import psutil
import pytest
from click.testing import CliRunner

from contract import files
from contract.rundir import JobState, JobStatus
from runner import api
from runner.backends.base import LocalRequest, Process
from runner.backends.local import processes
from runner.backends.local.backend import SUPERVISOR_FILE, LocalBackend
from runner.cli import main
from runner.errors import RunnerError
from runner.job.spec import resolve
from runner.results import rundir
from tests.runner.local_runs import sleeping_run


def test_cancel_never_signals_a_process_a_forged_supervisor_json_names(tmp_path):
    spec = resolve("cnn-digits", run_id="cnn-digits-forged")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-forged"))
    rundir.write_state(run_dir, JobStatus(JobState.RUNNING))
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        created = psutil.Process(bystander.pid).create_time()
        files.write_json(run_dir / SUPERVISOR_FILE, {"pid": bystander.pid, "create_time": created})
        run = api.open_run(tmp_path, "cnn-digits-forged")
        assert api.cancel(tmp_path, run).state.finished
        time.sleep(0.5)
        assert bystander.poll() is None  # never signalled: it does not belong to the run
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_belongs_to_a_run_only_when_its_environment_names_it(tmp_path):
    env = {**os.environ, **processes.run_env("run-a", tmp_path)}
    member = subprocess.Popen(["sleep", "30"], env=env)
    other = subprocess.Popen(["sleep", "30"], env={**env, processes.RUN_ID_ENV: "run-b"})
    try:
        found = {p.pid for p in processes.members("run-a", tmp_path)}
        assert member.pid in found and other.pid not in found
    finally:
        for p in (member, other):
            p.kill()
            p.wait()


def test_a_process_that_left_the_runs_environment_does_not_outlive_the_run(tmp_path):
    """A worker starts a daemon with a clean environment (`setsid env -i`) and exits: no
    member of the run by its environment, the orphan came back to the supervisor (a
    subreaper) and went on to init when it exited, outliving the run."""
    spec = resolve("cnn-digits", run_id="cnn-digits-daemon")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", "local://cnn-digits-daemon"))
    # The worker exits once the daemon has written its pid: it exists before the run ends.
    daemon = (
        "setsid env -i sh -c 'echo $$ > daemon.pid; exec sleep 600' </dev/null >/dev/null 2>&1 & "
        "while [ ! -s daemon.pid ]; do sleep 0.01; done"
    )
    LocalBackend(tmp_path).submit(
        LocalRequest(str(run_dir), (Process(("sh", "-c", daemon), cwd=str(run_dir)),))
    )
    api.wait(tmp_path, api.open_run(tmp_path, spec.run_id))
    with contextlib.suppress(psutil.Error):  # it records the outcome, then exits
        psutil.Process(files.read_json(run_dir / SUPERVISOR_FILE)["pid"]).wait(timeout=60)
    try:
        left = psutil.Process(int((run_dir / "daemon.pid").read_text()))
        alive = left.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        alive = False
    if alive:
        left.kill()
    assert not alive, "the daemon outlived the run"


def test_a_copied_run_directory_is_damaged_and_never_reaches_the_original_run(tmp_path):
    run = sleeping_run(tmp_path, "cnn-digits-original")
    try:
        shutil.copytree(
            run.run_dir, tmp_path / "cnn-digits-backup"
        )  # its job.json is the original's
        result = CliRunner().invoke(
            main, ["--results-dir", str(tmp_path), "cancel", "cnn-digits-backup", "--yes"]
        )
        assert result.exit_code == 1, result.output
        assert "not its directory" in result.output
        (copy,) = [i for i in api.list_runs(tmp_path) if i.run_dir.name == "cnn-digits-backup"]
        assert copy.damage is not None and "not its directory" in copy.damage
        assert api.status(tmp_path, run).state is not JobState.CANCELLED  # still going
    finally:
        assert api.cancel(tmp_path, run).state is JobState.CANCELLED


def test_a_local_handle_names_its_run_exactly_never_by_a_prefix(tmp_path):
    run = sleeping_run(tmp_path, "cnn-digits-original")
    try:
        with pytest.raises(RunnerError):
            LocalBackend(tmp_path).status("local://cnn-digits-orig")
    finally:
        api.cancel(tmp_path, run)
