"""Disks that refuse writes, for real: a full tmpfs and a read-only one, at submit and mid-run.

Each test mounts its own small tmpfs (needs root, as in CI); where mounting is not permitted
the tests skip and say so.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from contract.rundir import JobState, JobStatus, read_state
from runner import api
from runner.results import rundir
from tests.conftest import submit_local
from tests.disks import fill, leftovers, runner, tmpfs
from tests.runner.training import wait_for_training


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
        wait_for_training(run)
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


def test_a_fifo_at_state_json_on_a_read_only_disk_never_hangs_the_supervisor(tmp_path):
    """state.json cannot be replaced (read-only), so the supervisor overwrites it in place:
    a FIFO planted there made that open wait for a reader for ever, deaf to SIGTERM."""
    from contract import files
    from runner.backends.local import launch, supervisor
    from tests.disks import read_only

    with tmpfs(tmp_path / "disk", "1m") as disk:
        run_dir = disk / "run"
        (run_dir / "logs").mkdir(parents=True)
        os.mkfifo(run_dir / "state.json")
        process = {"argv": ["true"], "env": {}, "cwd": str(run_dir)}
        files.write_json(run_dir / "launch.json", {"run_dir": str(run_dir), "processes": [process]})
        digest = launch.digest((run_dir / "launch.json").read_bytes())
        read_only(disk)
        try:
            done = subprocess.run(
                supervisor.command(run_dir, digest), capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        except subprocess.TimeoutExpired as hung:  # run() has killed it
            raise AssertionError("the supervisor hung on the FIFO at state.json") from hung
        assert done.returncode == 1
        assert f"cannot record FAILED in {run_dir / 'state.json'}" in done.stdout
        assert "Read-only file system" in done.stdout and "Traceback" not in done.stderr


def test_a_join_answer_the_full_disk_refuses_never_ends_the_run(tmp_path):
    """`runner join` on a full disk: the supervisor's answer cannot be written. It died of
    that (ENOSPC), taking the elastic run with it; the request is now answered once the
    disk takes it, and the run goes on."""
    import secrets

    from contract import files
    from contract.rundir import STATE
    from runner.backends.local import joins, launch, processes
    from runner.backends.local.supervisor import command

    with tmpfs(tmp_path / "disk", "1m") as disk:
        run_dir = disk / "run"
        (run_dir / "logs").mkdir(parents=True)
        (run_dir / joins.REQUESTS).mkdir()
        sleeper = {"argv": ["sleep", "60"], "env": {}, "cwd": str(run_dir)}
        files.write_json(run_dir / "launch.json", {"run_dir": str(run_dir), "min_workers": 1,
                                                   "processes": [sleeper, sleeper]})  # fmt: skip
        env = {**os.environ, **processes.run_env(run_dir.name, run_dir)}
        with open(tmp_path / "supervisor.out", "wb") as out:
            digest = launch.digest((run_dir / "launch.json").read_bytes())
            supervisor = subprocess.Popen(
                command(run_dir, digest), stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        try:
            while (
                read_state(run_dir) or JobStatus(JobState.PENDING)
            ).state is not JobState.RUNNING:
                assert supervisor.poll() is None, (tmp_path / "supervisor.out").read_text()
                time.sleep(0.05)
            fill(disk)
            token = f"join-{secrets.token_hex(8)}"
            (run_dir / joins.REQUESTS / token).touch()  # an inode, no block: a full disk takes it
            answer = run_dir / joins.REQUESTS / (token + joins.ANSWER_SUFFIX)
            for _ in range(20):  # polls in which the supervisor meets the full disk
                assert supervisor.poll() is None, (tmp_path / "supervisor.out").read_text()
                time.sleep(0.05)
            os.unlink(disk / "filler")
            while not answer.exists():
                assert supervisor.poll() is None, (tmp_path / "supervisor.out").read_text()
                time.sleep(0.05)
            assert files.read_json(answer)["started"] is False  # two workers: its maximum
            assert read_state(run_dir).state is JobState.RUNNING  # type: ignore[union-attr]
        finally:
            supervisor.terminate()
            supervisor.wait(timeout=60)
        assert files.read_json(run_dir / STATE)["state"] == "CANCELLED"
        assert "Traceback" not in (tmp_path / "supervisor.out").read_text()
