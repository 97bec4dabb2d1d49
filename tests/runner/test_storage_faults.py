"""Disks that refuse writes, for real: a full tmpfs and a read-only one, at submit and mid-run.

Each test mounts its own small tmpfs (needs root, as in CI); where mounting is not permitted
the tests skip and say so.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from contract.events import read_events
from contract.rundir import EVENTS, JobState, read_state
from runner import api
from runner.results import rundir
from tests.conftest import submit_local
from tests.disks import fill, leftovers, runner, tmpfs


def test_a_full_disk_at_submit_is_one_line_and_leaves_nothing(tmp_path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        (disk / "results").mkdir()
        fill(disk)
        done = runner(disk / "results", "submit", "cnn-digits")
        assert done.returncode == 1, done.stdout + done.stderr
        out = (done.stdout + done.stderr).strip()
        assert "Traceback" not in out
        assert len(out.splitlines()) == 1
        assert "No space left on device" in out and str(disk / "results") in out
        assert leftovers(disk / "results") == []  # no empty run directory, no *.tmp


def test_a_read_only_disk_at_submit_is_one_line_and_leaves_nothing(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        (disk / "results").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        done = runner(disk / "results", "submit", "cnn-digits")
        assert done.returncode == 1
        out = (done.stdout + done.stderr).strip()
        assert "Traceback" not in out and len(out.splitlines()) == 1
        assert "Read-only file system" in out and "read-only" in out
        assert leftovers(disk / "results") == []


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_ends_it_failed_with_that_reason(tmp_path):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        results = disk / "results"
        run = submit_local(results, ["stop_at_target=false", "max_epochs=400"])
        deadline = time.monotonic() + 90
        while "epoch_start" not in [e["key"] for e in read_events(run.run_dir / EVENTS)]:
            assert time.monotonic() < deadline, "the run never started training"
            time.sleep(0.1)
        fill(disk)
        status = api.wait(results, run)
        assert status.state is JobState.FAILED
        assert "no space left" in status.reason
        assert read_state(run.run_dir) == status  # recorded on the full disk itself
        assert not [p for p in run.run_dir.rglob("*.tmp")]
        assert not list(run.run_dir.rglob(".*.tmp"))
        os.unlink(disk / "filler")
        assert rundir.list_dirs(results) == [run.run_dir]


def test_a_submit_that_cannot_record_its_supervisor_leaves_nothing_running(tmp_path):
    from runner.backends.base import LocalRequest, Process
    from runner.backends.local import processes
    from runner.backends.local.backend import SUPERVISOR_FILE, LocalBackend
    from runner.job.spec import resolve

    spec = resolve("cnn-digits", run_id="cnn-digits-unrecorded")
    run_dir = rundir.create(tmp_path, rundir.RunRecord(spec, "local", f"local://{spec.run_id}"))
    (run_dir / SUPERVISOR_FILE).mkdir()  # supervisor.json cannot be written, as on a full disk
    request = LocalRequest(str(run_dir.absolute()), (Process(("sleep", "60")),))
    with pytest.raises(OSError):
        LocalBackend(tmp_path).submit(request)
    time.sleep(1.0)  # time enough for a supervisor left running to start its process
    left = processes.members(spec.run_id, run_dir)
    processes.end(left, 5.0)
    assert left == []
